"""Turns chain (stack/serving/chain.py, stack/serving/template_fix.py, stack/serving/served_template.py) with REAL templates and a
real BPE: Qwen3's and Qwen3.5's published templates and Qwen3-Coder's (no thinking), Qwen's byte-level BPE
(tests/fixtures/chat_templates/README.md says where each came from).

Each row of issue 39's table is a test: the published Qwen3 template under that configuration forks (today's
code served it and checked nothing), the start-up check refuses it in one line naming the rule, and the derived
template chains wherever the row can chain. A string-level check would miss what the ids show: a reply ending
in "\\n" plus the template's own "\\n" is token 271 where the engine sampled 198.
"""

from __future__ import annotations

import json

import pytest
import tokenizers  # noqa: F401 -- requirements/test.txt installs it: a missing tokenizer must fail, not skip
from fixtures.chat_templates.real_tokenizer import QwenTokenizer, template  # noqa: E402

from stack.env import EnvError  # noqa: E402
from stack.serving import chain, served_template, template_fix, turn_end  # noqa: E402

IM_END = 151645
OFF = {"enable_thinking": False}


def verdict(name: str, kwargs=None, reasoning="", parser="hermes", derived=False) -> chain.Verdict:
    source = template(name)
    if derived:
        source = template_fix.derive(source).template
    tok = QwenTokenizer(source)
    return chain.check(tok, source, kwargs or {}, reasoning, parser, IM_END)


def test_the_tokenizer_is_qwens_real_bpe():
    tok = QwenTokenizer(template("qwen3"))
    # rtp-llm's own check of this vocab, and the merge the check depends on: "\n\n" is one token.
    assert tok.encode("<|im_start|>hello<|im_end|>") == [151644, 14990, 151645]
    assert tok.encode("\n") == [198] and tok.encode("\n\n") == [271]
    assert tok.encode("<think>\n</think>") == [151667, 198, 151668]
    assert turn_end.template_turn_end(tok) == (IM_END, "")


# ---- the issue's table, on Qwen3's published template ----------------------------------------------------


def test_row1_thinking_on_reasoning_in_content_a_call_alone_chains_on_the_published_template():
    tok = QwenTokenizer(template("qwen3"))
    assert chain.replay(tok, template("qwen3"), {}, "", False, IM_END) == ""


def test_row2_text_before_the_call_forks_on_the_published_template_by_one_token():
    tok = QwenTokenizer(template("qwen3"))
    where = chain.replay(tok, template("qwen3"), {}, "", True, IM_END)
    # The engine sampled ".\n" then <tool_call>; the next prompt has ".\n\n": the template's own "\n" after the
    # text's, which BPE merges into one token a string-prefix check would not flag as a different token.
    assert "['.ĊĊ', '<tool_call>', 'Ċ', '{\"']" in where and "['.Ċ', '<tool_call>', 'Ċ', '{\"']" in where
    v = verdict("qwen3")
    assert not v.chains and "reply: text then a call" in v.line
    assert "the template adds its own separator before a call" in v.line and "CHAT_TEMPLATE_FIX=auto" in v.line


def test_row3_a_reasoning_parser_forks_and_the_derived_template_cannot_save_it():
    for derived in (False, True):
        v = verdict("qwen3", reasoning="qwen3", derived=derived)
        assert not v.chains and "reply: a call alone" in v.line
        assert "REASONING_PARSER=qwen3 moves the think block out" in v.line and "leave REASONING_PARSER empty" in v.line


def test_row4_thinking_off_forks_on_the_published_template():
    tok = QwenTokenizer(template("qwen3"))
    where = chain.replay(tok, template("qwen3"), OFF, "", False, IM_END)
    # The prompt ended with the empty think block; history renders the call without it.
    assert "['<tool_call>', 'Ċ', '{\"', 'name']" in where and "['<think>', 'ĊĊ', '</think>', 'ĊĊ']" in where
    v = verdict("qwen3", OFF)
    assert not v.chains and "CHAT_TEMPLATE_KWARGS turns thinking off" in v.line


# ---- the derived template: every row that can chain does --------------------------------------------------


@pytest.mark.parametrize("kwargs", [{}, OFF], ids=["thinking-on", "thinking-off"])
@pytest.mark.parametrize("name,parser", [("qwen3", "hermes"), ("qwen3_5", "qwen3_coder")])
def test_the_derived_template_chains_with_and_without_text_before_the_call(name, parser, kwargs):
    v = verdict(name, kwargs, parser=parser, derived=True)
    assert v.chains, v.line
    assert v.line.startswith("turns chain (") and "with and without text before the call" in v.line


@pytest.mark.parametrize("think", ["", "<think>\n\n</think>\n\n"], ids=["no-think-block", "empty-think-block"])
def test_the_derived_qwen3_template_chains_whatever_think_block_the_model_wrote(think):
    """A thinking-on turn whose reply has no think block (a policy that skips it; the mock engine's scripted
    calls) or an empty one: the block the model wrote is the block the next prompt renders."""
    source = template_fix.derive(template("qwen3")).template
    for with_text in (False, True):
        assert chain.replay(QwenTokenizer(source), source, {}, "", with_text, IM_END, think) == ""
    # As published, the empty block the model wrote is dropped from history (its reasoning is empty); a reply
    # without one chains there too.
    published = template("qwen3")
    assert "turn 2's prompt does not start" in chain.replay(
        QwenTokenizer(published), published, {}, "", False, IM_END, "<think>\n\n</think>\n\n"
    )
    assert chain.replay(QwenTokenizer(published), published, {}, "", False, IM_END, "") == ""


def test_the_derivation_is_named_and_changes_only_the_gates():
    q3 = template_fix.derive(template("qwen3"))
    assert q3.applied == (
        "history-keeps-reasoning",
        "think-block-where-one-was-written",
        "no-doubled-newline-before-call",
    )
    assert "ns.last_query_index" in q3.template  # the gate's bookkeeping stays; only the comparisons change
    assert "loop.index0 > ns.last_query_index" not in q3.template
    q35 = template_fix.derive(template("qwen3_5"))
    assert q35.applied == ("history-keeps-reasoning",)
    assert "CHAT_TEMPLATE_FIX=auto: history keeps its reasoning" in q3.line()


def test_a_family_without_thinking_is_served_as_published_and_chains():
    coder = template("qwen3_coder")
    assert template_fix.derive(coder) == template_fix.Derived(coder, ())
    assert verdict("qwen3_coder", parser="qwen3_coder").chains
    assert verdict("qwen3_coder", OFF, parser="qwen3_coder").chains


def test_history_keeps_its_reasoning_under_the_derived_template():
    """What the model now sees that it did not: every history turn's think block, as sampled."""
    tok = QwenTokenizer(template_fix.derive(template("qwen3")).template)
    reply = f"<think>\n{chain.REASONING}\n</think>\n\n"
    history = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": reply, "tool_calls": [{"function": {"name": "bash", "arguments": {}}}]},
        {"role": "tool", "content": "out"},
        {"role": "assistant", "content": reply, "tool_calls": [{"function": {"name": "bash", "arguments": {}}}]},
        {"role": "tool", "content": "out"},
    ]
    derived = tok.apply_chat_template(history, add_generation_prompt=True)
    published = QwenTokenizer(template("qwen3")).apply_chat_template(history, add_generation_prompt=True)
    assert derived.count(chain.REASONING) == 2
    assert published.count(chain.REASONING) == 2  # after the last user message, as published too...
    with_user = [*history[:3], {"role": "user", "content": "more"}, *history[3:]]
    assert QwenTokenizer(template("qwen3")).apply_chat_template(with_user).count(chain.REASONING) == 1
    assert tok.apply_chat_template(with_user).count(chain.REASONING) == 2  # ...but not past a user message


def test_the_engine_message_is_split_as_vllms_hermes_parser_splits_it():
    reply = '<think>\nr\n</think>\n\nSome text.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
    msg = chain.engine_message(reply, "", 0)
    assert msg["content"] == "<think>\nr\n</think>\n\nSome text.\n"  # unstripped, think block included
    assert msg["tool_calls"][0]["function"]["arguments"] == json.dumps({"command": "ls -la"})
    assert chain.engine_message(reply, "qwen3", 0)["content"] == "\n\nSome text.\n"  # reasoning moved out
    assert chain.engine_message("<tool_call>\n{}\n</tool_call>", "", 0)["content"] is None  # None when empty
    assert chain.as_vllm_renders({"role": "assistant", "content": None, "tool_calls": msg["tool_calls"]}) == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{**msg["tool_calls"][0], "function": {"name": "bash", "arguments": {"command": "ls -la"}}}],
    }


def test_an_unknown_parser_is_said_unchecked_not_passed():
    v = verdict("qwen3", parser="mistral")
    assert (v.chains, v.checked) == (False, False) and v.line.startswith("turns NOT CHECKED: TOOL_CALL_PARSER=mistral")


# ---- start-up: served_template.prepare --------------------------------------------------------------------


def test_startup_derives_writes_and_passes_the_default(tmp_path):
    tok = QwenTokenizer(template("qwen3"))
    served = served_template.prepare({}, tok, False, out_file=tmp_path / "t.jinja")
    assert served.path == str(tmp_path / "t.jinja")
    assert (tmp_path / "t.jinja").read_text() == template_fix.derive(template("qwen3")).template
    assert served.verdict.chains
    assert served.line().startswith("chat template: the model's chat template with history-keeps-reasoning")


@pytest.mark.parametrize(
    "env,rule",
    [
        ({"CHAT_TEMPLATE_FIX": "off"}, "the template adds its own separator before a call"),
        ({"CHAT_TEMPLATE_FIX": "off", "CHAT_TEMPLATE_KWARGS": '{"enable_thinking": false}'}, "turns thinking off"),
        ({"REASONING_PARSER": "qwen3"}, "REASONING_PARSER=qwen3 moves the think block out"),
    ],
    ids=["row2-published", "row4-published", "row3"],
)
def test_startup_refuses_each_forking_row_in_one_line(tmp_path, env, rule):
    tok = QwenTokenizer(template("qwen3"))
    with pytest.raises(EnvError) as exc:
        served_template.prepare(env, tok, False, out_file=tmp_path / "t.jinja")
    line = str(exc.value)
    assert "\n" not in line and line.startswith("turns FORK (") and rule in line
    assert line.endswith("; or set TURN_CHAIN_CHECK=warn to serve it anyway")


def test_startup_warns_instead_when_told(tmp_path):
    tok = QwenTokenizer(template("qwen3"))
    served = served_template.prepare(
        {"REASONING_PARSER": "qwen3", "TURN_CHAIN_CHECK": "warn"}, tok, False, out_file=tmp_path / "t.jinja"
    )
    assert not served.verdict.chains and "turns FORK" in served.line()


def test_an_operators_template_is_served_as_given_and_still_checked(tmp_path):
    tok = QwenTokenizer(template("qwen3"))
    with pytest.raises(EnvError, match="turns FORK"):
        served_template.prepare({}, tok, True, out_file=tmp_path / "t.jinja")
    assert not (tmp_path / "t.jinja").exists()


def test_a_bad_setting_is_one_line():
    with pytest.raises(EnvError, match=r"^CHAT_TEMPLATE_FIX='sometimes' is not allowed"):
        served_template.prepare({"CHAT_TEMPLATE_FIX": "sometimes"}, None, False)


def test_what_a_string_level_check_would_miss():
    """The rendered text of turn k+1 can start with turn k's text while its ids do not start with turn k's ids: a
    "\\n" the reply begins with merges with the prompt's own "\\n" into one token. The check compares ids."""
    tok = QwenTokenizer(template("qwen3"))
    prompt, reply = "<|im_start|>assistant\n", "\nLet me look."
    assert (prompt + reply).startswith(prompt)
    assert tok.encode(prompt) == [151644, 77091, 198]
    assert tok.encode(prompt + reply)[:3] == [151644, 77091, 271]


@pytest.mark.parametrize("name", ["qwen3", "qwen3_5", "qwen3_coder"])
def test_the_stand_in_render_is_transformers_own(name):
    """Where transformers is installed (the engine and mock-engine images; not the host venv), its own
    apply_chat_template renders every template and conversation of these tests exactly as the stand-in does."""
    transformers = pytest.importorskip("transformers")
    stand_in = QwenTokenizer(template(name))
    real = transformers.PreTrainedTokenizerFast(tokenizer_object=stand_in.core, eos_token="<|im_end|>")
    history = [{"role": "system", "content": chain.SYSTEM}, {"role": "user", "content": chain.TASK}]
    reply = '<think>\nR\n</think>\n\nText.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
    for k in range(2):
        history += [chain.as_vllm_renders(chain.engine_message(reply, "", k)), {"role": "tool", "content": "out"}]
    for source in (template(name), template_fix.derive(template(name)).template):
        for kwargs in ({}, OFF):
            ours = render_with(source, history, kwargs)
            theirs = real.apply_chat_template(
                history,
                tools=[chain.BASH_TOOL],
                tokenize=False,
                add_generation_prompt=True,
                chat_template=source,
                **kwargs,
            )
            assert ours == theirs


def render_with(source, history, kwargs):
    from fixtures.chat_templates.real_tokenizer import render

    return render(source, history, [chain.BASH_TOOL], True, eos_token="<|im_end|>", **kwargs)
