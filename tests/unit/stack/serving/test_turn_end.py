"""The engine's stop set against the chat template's turn end (stack/serving/turn_end.py): which token closes an
assistant turn, the stop set each TURN_END_TOKENS gives, and the one line that says so.

The tokenizer is a stand-in with transformers' interface (apply_chat_template, encode, the special-token
lists) over two template shapes: ChatML as Qwen3 renders it (ids as Qwen3's) and Llama 3's header form."""

from __future__ import annotations

import re

import pytest

from stack.env import EnvError
from stack.serving import turn_end

ENDOFTEXT, IM_START, IM_END = 151643, 151644, 151645  # Qwen3's ids
BEGIN, END_OF_TEXT, EOM, EOT, HEADER, HEADER_END = 128000, 128001, 128008, 128009, 128006, 128007  # Llama 3.1's


def chatml(messages, add_generation_prompt):
    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return out + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def llama3(messages, add_generation_prompt):
    out = "<|begin_of_text|>" + "".join(
        f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content']}<|eot_id|>" for m in messages
    )
    return out + ("<|start_header_id|>assistant<|end_header_id|>\n\n" if add_generation_prompt else "")


class Tokenizer:
    """Special tokens by name; every other character is one id (1000 + its code point)."""

    def __init__(self, specials: dict[str, int], eos: str, render):
        self.specials, self.render = specials, render
        self.eos_token_id = specials[eos]
        self.all_special_ids = list(specials.values())
        self.unk_token_id = None
        self.kwargs_seen: dict = {}

    def apply_chat_template(self, messages, tokenize, add_generation_prompt, **kwargs):
        assert tokenize is False
        self.kwargs_seen = kwargs
        return self.render(messages, add_generation_prompt)

    def encode(self, text, add_special_tokens):
        assert add_special_tokens is False
        pattern = "(" + "|".join(re.escape(s) for s in self.specials) + ")"
        ids = []
        for part in re.split(pattern, text):
            ids += [self.specials[part]] if part in self.specials else [1000 + ord(c) for c in part]
        return ids

    def convert_tokens_to_ids(self, name):
        return self.specials.get(name)

    def convert_ids_to_tokens(self, tid):
        return next((k for k, v in self.specials.items() if v == tid), chr(tid - 1000))


QWEN = {"<|endoftext|>": ENDOFTEXT, "<|im_start|>": IM_START, "<|im_end|>": IM_END}
LLAMA = {
    "<|begin_of_text|>": BEGIN,
    "<|end_of_text|>": END_OF_TEXT,
    "<|eom_id|>": EOM,
    "<|eot_id|>": EOT,
    "<|start_header_id|>": HEADER,
    "<|end_header_id|>": HEADER_END,
}


def qwen3(eos="<|im_end|>", render=chatml):
    return Tokenizer(QWEN, eos, render)


def test_the_turn_end_is_the_token_after_the_assistants_reply():
    assert turn_end.template_turn_end(qwen3()) == (IM_END, "")
    assert turn_end.template_turn_end(Tokenizer(LLAMA, "<|eot_id|>", llama3)) == (EOT, "")
    tok = qwen3()
    turn_end.template_turn_end(tok, {"enable_thinking": False})
    assert tok.kwargs_seen == {"enable_thinking": False}  # CHAT_TEMPLATE_KWARGS reach the template


def test_qwen3_auto_stops_on_im_end_alone_and_says_why():
    plan = turn_end.plan_for_tokenizer(qwen3(), [IM_END, ENDOFTEXT], "auto")
    assert (plan.turn_end, plan.model_stops, plan.stops, plan.eos_token_id) == (
        IM_END,
        (IM_END, ENDOFTEXT),
        (IM_END,),
        (IM_END,),
    )
    assert plan.agrees and plan.extra == ()
    assert plan.line() == (
        "turn end <|im_end|> (151645): the engine stops on it alone (TURN_END_TOKENS=auto); the model's generation "
        "config also stops on <|endoftext|> (151643), which the chat template never renders at a turn's end (a "
        "turn ending there would fork its rollout); TURN_END_TOKENS=model keeps the model's stops"
    )


def test_qwen3_model_keeps_both_and_the_line_names_the_fork_and_the_fix():
    plan = turn_end.plan_for_tokenizer(qwen3(), [IM_END, ENDOFTEXT], "model")
    assert (plan.stops, plan.eos_token_id, plan.extra, plan.agrees) == ((IM_END, ENDOFTEXT), None, (ENDOFTEXT,), False)
    assert plan.line() == (
        "turn ends DISAGREE: the engine stops on <|im_end|> (151645), <|endoftext|> (151643) (TURN_END_TOKENS=model), "
        "but the chat template closes an assistant turn with <|im_end|> (151645) only: a turn ending on <|endoftext|> "
        "(151643) forks its rollout (the next prompt renders <|im_end|> (151645) in its place); set "
        "TURN_END_TOKENS=auto"
    )


def test_llama3_auto_drops_end_of_text_and_eom():
    plan = turn_end.plan_for_tokenizer(Tokenizer(LLAMA, "<|eot_id|>", llama3), [END_OF_TEXT, EOM, EOT], "auto")
    assert (plan.stops, plan.eos_token_id) == ((EOT,), (EOT,))
    assert "also stops on <|end_of_text|> (128001), <|eom_id|> (128008), which the chat template" in plan.line()


def test_a_model_that_already_agrees_says_so():
    plan = turn_end.plan_for_tokenizer(qwen3(), IM_END, "auto")
    assert plan.stops == (IM_END,) and plan.eos_token_id == (IM_END,)
    assert plan.line() == (
        "turn end <|im_end|> (151645): the engine's stop set and the chat template's turn end agree "
        "(TURN_END_TOKENS=auto)"
    )


def test_a_listed_stop_set_is_taken_by_name_or_id_and_checked_against_the_template():
    plan = turn_end.plan_for_tokenizer(qwen3(), [IM_END, ENDOFTEXT], ("<|im_end|>",))
    assert plan.stops == (IM_END,) and plan.line().endswith("TURN_END_TOKENS=model keeps the model's stops")
    both = turn_end.plan_for_tokenizer(qwen3(), [IM_END], ("<|im_end|>", str(ENDOFTEXT)))
    assert both.stops == (IM_END, ENDOFTEXT) and both.eos_token_id == (IM_END, ENDOFTEXT)
    assert both.line().startswith("turn ends DISAGREE: the engine stops on <|im_end|> (151645), <|endoftext|> (151643)")
    assert "(TURN_END_TOKENS=<|im_end|>,151643)" in both.line()


def test_a_listed_token_the_tokenizer_does_not_have_is_refused_in_one_line():
    with pytest.raises(EnvError) as err:
        turn_end.plan_for_tokenizer(qwen3(), [IM_END], ("<|im_end|>", "<|eot_id|>"))
    assert str(err.value) == (
        "TURN_END_TOKENS names '<|eot_id|>', which is not one token of this model's tokenizer: set TURN_END_TOKENS "
        "to auto, model, or a comma-separated list of tokens, e.g. <|im_end|>"
    )


def test_a_tokenizer_whose_eos_is_not_the_turn_end_cannot_be_fixed_by_the_generation_config():
    """A base model's tokenizer (eos <|endoftext|>) under a ChatML template: vLLM stops on the eos whatever the
    generation config says, so the line names the tokenizer as the fix; auto still adds the turn end."""
    plan = turn_end.plan_for_tokenizer(qwen3(eos="<|endoftext|>"), ENDOFTEXT, "auto")
    assert plan.stops == (ENDOFTEXT, IM_END) and plan.eos_token_id == (IM_END,)
    assert plan.line() == (
        "turn ends DISAGREE: the chat template closes an assistant turn with <|im_end|> (151645), but vLLM always "
        "stops on the tokenizer's eos_token <|endoftext|> (151643): a turn ending there forks its rollout (the next "
        "prompt renders <|im_end|> (151645) in its place); serve a tokenizer whose eos_token is <|im_end|> (vLLM's "
        "--tokenizer in ENGINE_EXTRA_ARGS)"
    )


def test_a_stop_set_without_the_turn_end_runs_turns_on():
    plan = turn_end.plan_for_tokenizer(qwen3(eos="<|endoftext|>"), ENDOFTEXT, "model")
    assert plan.line() == (
        "turn ends DISAGREE: the engine stops on <|endoftext|> (151643) (TURN_END_TOKENS=model) but not on the chat "
        "template's turn end <|im_end|> (151645): a turn runs past it to max_tokens; set TURN_END_TOKENS=auto"
    )


@pytest.mark.parametrize(
    ("render", "why"),
    [
        (
            lambda m, g: "".join(f"{x['role']}: {x['content']}\n\n" for x in m),
            "the chat template closes an assistant turn with plain text ('\\n\\nuser: Again.\\n\\n'), not a token",
        ),
        (
            lambda m, g: "<|im_start|>user\nSay something.<|im_end|>\n",
            "the chat template dropped the assistant's reply",
        ),
        (
            lambda m, g: "".join(x["content"] for x in m if x["role"] != "user"),
            "the chat template renders nothing after the assistant's reply",
        ),
        (lambda m, g: 1 / 0, "the chat template did not render a user/assistant/user conversation (division by zero)"),
    ],
)
def test_a_template_without_a_turn_end_token_leaves_the_models_stops_and_says_how_to_set_them(render, why):
    plan = turn_end.plan_for_tokenizer(qwen3(render=render), [IM_END, ENDOFTEXT], "auto")
    assert (plan.turn_end, plan.stops, plan.eos_token_id) == (None, (IM_END, ENDOFTEXT), None)
    assert plan.line() == (
        f"turn end unknown ({why}): the engine stops on <|im_end|> (151645), <|endoftext|> (151643) "
        "(TURN_END_TOKENS=auto); if a turn can end on a token the chat template does not render there, that rollout "
        "forks: set TURN_END_TOKENS to the token that closes an assistant turn"
    )


def test_no_tokenizer_at_all_keeps_the_models_stop_set():
    plan = turn_end.decide("auto", None, "the tokenizer of m did not load: OSError", None, None)
    assert plan.stops == () and plan.eos_token_id is None
    assert plan.line().startswith(
        "turn end unknown (the tokenizer of m did not load: OSError): the engine keeps the model's own stop set "
        "(TURN_END_TOKENS=auto)"
    )


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [("", "auto"), ("AUTO", "auto"), (" model ", "model"), ("<|im_end|>", ("<|im_end|>",)), ("a, b", ("a", "b"))],
)
def test_the_setting_reads(raw, parsed):
    assert turn_end.parse_setting(raw) == parsed


def test_an_empty_entry_is_refused():
    with pytest.raises(EnvError) as err:
        turn_end.parse_setting("<|im_end|>,,x")
    assert str(err.value) == (
        "TURN_END_TOKENS='<|im_end|>,,x' has an empty entry: set TURN_END_TOKENS to auto, model, or a "
        "comma-separated list of tokens, e.g. <|im_end|>"
    )


def test_the_record_the_probe_reads(tmp_path):
    path = tmp_path / "record"
    assert turn_end.read_record(path) == "" and turn_end.read_record(None) == ""
    turn_end.write_record("turn end <|im_end|> (2): agree", path)
    assert turn_end.read_record(path) == "turn end <|im_end|> (2): agree"
    turn_end.write_record("x", tmp_path / "missing" / "record")  # unwritable: the probe just says nothing
