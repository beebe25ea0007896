"""The CPU form renders like production under MOCK_CHAT_RULES=qwen3 (mock_engine/tokenizer.py QWEN3_RULES_TEMPLATE,
mock_engine/toolcalls.py parse_hermes): the mock's template forks where Qwen3's published template forks, the
derived template chains, and the start-up check (stack/serving/served_template.py) passes with the switch on.

The tokenizer here is the mock's own vocabulary (mock_engine/tokenizer.py: its three special tokens, then one id
per character), encoded without transformers (not in the host venv); the template is rendered as transformers
5.17 renders it (tests/fixtures/chat_templates/real_tokenizer.py). tests/integration/mock_engine/test_chat_rules.py
runs the same with the mock's real tokenizer and app in its image.
"""

from __future__ import annotations

import json
import re

import pytest
from fixtures.chat_templates.real_tokenizer import render

from mock_engine import agent_turns, toolcalls
from mock_engine.tokenizer import CHARS, CHAT_TEMPLATE, EOS, QWEN3_RULES_TEMPLATE, SPECIALS
from stack.env import EnvError
from stack.serving import chain, served_template, template_fix, turn_end

END = SPECIALS.index(EOS)


class MockVocab:
    """The mock engine's vocabulary: SPECIALS, then CHARS; one id per character."""

    def __init__(self, chat_template: str):
        self.chat_template = chat_template
        self.vocab = {t: i for i, t in enumerate(SPECIALS + CHARS)}
        self.all_special_ids = list(range(len(SPECIALS)))
        self.eos_token_id, self.unk_token_id = END, None

    def apply_chat_template(self, messages, tools=None, tokenize=False, add_generation_prompt=False, **kwargs):
        assert tokenize is False
        return render(self.chat_template, messages, tools, add_generation_prompt, **kwargs)

    def encode(self, text, add_special_tokens=False):
        parts = re.split("(" + "|".join(re.escape(s) for s in SPECIALS) + ")", text)
        return [i for p in parts if p for i in ([self.vocab[p]] if p in SPECIALS else [self.vocab[c] for c in p])]

    def convert_ids_to_tokens(self, ids):
        names = SPECIALS + CHARS
        return names[ids] if isinstance(ids, int) else [names[i] for i in ids]


def check(source: str, kwargs=None, reasoning="") -> chain.Verdict:
    return chain.check(MockVocab(source), source, kwargs or {}, reasoning, "hermes", END)


def test_the_mock_template_ends_turns_where_the_engine_stops():
    assert turn_end.template_turn_end(MockVocab(QWEN3_RULES_TEMPLATE)) == (END, "")


def test_under_qwen3_rules_the_mock_forks_where_qwen3s_published_template_forks():
    text = check(QWEN3_RULES_TEMPLATE)
    assert not text.chains and "reply: text then a call" in text.line
    assert "the template adds its own separator before a call" in text.line
    off = check(QWEN3_RULES_TEMPLATE, {"enable_thinking": False})
    assert not off.chains and "CHAT_TEMPLATE_KWARGS turns thinking off" in off.line
    assert not check(QWEN3_RULES_TEMPLATE, reasoning="qwen3").chains
    # The mock's own rules hide all of it: a template that renders content and calls back verbatim.
    assert check(CHAT_TEMPLATE).chains and check(CHAT_TEMPLATE, {"enable_thinking": False}).chains


def test_the_derived_mock_template_chains_and_the_startup_check_passes_with_the_switch_on(tmp_path):
    derived = template_fix.derive(QWEN3_RULES_TEMPLATE)
    assert derived.applied == (
        "history-keeps-reasoning",
        "think-block-where-one-was-written",
        "no-doubled-newline-before-call",
    )
    for kwargs in ({}, {"enable_thinking": False}):
        assert check(derived.template, kwargs).chains, check(derived.template, kwargs).line
    for think in ("", "<think>\n\n</think>\n\n"):  # the scripted calls write no think block
        for with_text in (False, True):
            assert chain.replay(MockVocab(derived.template), derived.template, {}, "", with_text, END, think) == ""
    tok = MockVocab(QWEN3_RULES_TEMPLATE)
    served = served_template.prepare({}, tok, False, out_file=tmp_path / "t.jinja")
    assert served.verdict.chains and tok.chat_template == derived.template
    with pytest.raises(EnvError, match="turns FORK"):
        served_template.prepare({"CHAT_TEMPLATE_FIX": "off"}, MockVocab(QWEN3_RULES_TEMPLATE), False)


def _scripted_history(content):
    """The first two turns of a scripted rollout, as mini-swe-agent sends them back."""
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "ls"})}}
    return [
        *agent_turns.first_messages("Fix it.", ("Linux", "6.1", "#1", "x86_64")),
        {"role": "assistant", "content": content, "tool_calls": [call]},
        agent_turns.observation("a\nb\n", 0, "c1"),
    ]


@pytest.mark.parametrize("content", [None, ""])
def test_the_learnable_policys_prompts_are_the_same_under_both_rules(content):
    """The policy was tuned on the mock's own rules: its scripted-shape turns must render identically."""
    derived = template_fix.derive(QWEN3_RULES_TEMPLATE).template
    first = agent_turns.first_messages("Fix it.", ("Linux", "6.1", "#1", "x86_64"))
    tools = [agent_turns.BASH_TOOL]
    assert render(derived, first, tools, True) == render(CHAT_TEMPLATE, first, tools, True)
    history = [chain.as_vllm_renders(m) for m in _scripted_history(content)]
    assert render(derived, history, tools, True) == render(CHAT_TEMPLATE, _scripted_history(content), tools, True)


def test_the_hermes_split_keeps_what_vllm_keeps():
    call = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
    parsed = toolcalls.parse_hermes("I will look.\n" + call, tools_offered=True)
    assert parsed.content == "I will look.\n"  # unstripped
    assert [c["function"] for c in parsed.tool_calls] == [{"name": "bash", "arguments": '{"command": "ls"}'}]
    assert toolcalls.parse_hermes(call, tools_offered=True).content is None
    # Compact JSON: vLLM re-serialises the arguments (the next prompt renders '{"command": "ls"}'); the mock's
    # own parser refused the call instead, which hid the fork.
    compact = '<tool_call>\n{"name":"bash","arguments":{"command":"ls"}}\n</tool_call>'
    assert toolcalls.parse_hermes(compact, True).tool_calls[0]["function"]["arguments"] == '{"command": "ls"}'
    assert toolcalls.parse(compact, True).tool_calls == []
    # Text after the call is lost from the message, as vLLM's parser loses it.
    assert toolcalls.parse_hermes(call + " trailing", True).content is None
    assert toolcalls.parse_hermes('<tool_call>\n{"name": "bash"}\n</tool_call>', True) == toolcalls.Parsed(
        '<tool_call>\n{"name": "bash"}\n</tool_call>', []
    )
    assert toolcalls.parse_hermes(call, tools_offered=False) == toolcalls.Parsed(call, [])
