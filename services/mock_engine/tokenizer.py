"""A character-level tokenizer and a chat template that round-trips what the model generated.

Why character level: a turn chains onto the previous one only if re-rendering the conversation gives
back exactly the token ids that were sampled. A tokenizer with merges lets a small model sample a
non-canonical split of its own text (ids that re-tokenize differently), which forks every turn. With no
merges every text has exactly one tokenization. The vocabulary is printable ASCII plus tab and newline;
a normalizer maps anything else in a prompt to "?", so prompts still tokenize (deterministically) and
the model can only ever generate ASCII, which decodes and re-encodes to the same ids.

The chat template renders an assistant turn as `content` followed by each tool call in the exact text
form the model (or the scripted mode) generates, so a parsed turn renders back to the generated text;
`mock_engine.toolcalls` checks that byte for byte before it reports a tool call.
"""

from __future__ import annotations

EOS = "<|im_end|>"
BOS = "<|im_start|>"
PAD = "<|endoftext|>"
SPECIALS = [PAD, BOS, EOS]
CHARS = ["\t", "\n"] + [chr(c) for c in range(0x20, 0x7F)]

TOOL_CALL_OPEN = "<tool_call>\n"
TOOL_CALL_CLOSE = "\n</tool_call>"

# Jinja, rendered by transformers' apply_chat_template. Built from pieces with `nl` so no newline in the
# template source leaks into the output: every character emitted is deliberate.
CHAT_TEMPLATE = "".join(
    [
        "{%- set nl = '\\n' -%}",
        "{%- macro text(c) -%}{%- if c is string -%}{{ c }}{%- elif c -%}{%- for p in c -%}"
        "{%- if p.type == 'text' -%}{{ p.text }}{%- endif -%}{%- endfor -%}{%- endif -%}{%- endmacro -%}",
        "{%- set offset = 0 -%}",
        "{%- if messages and messages[0].role == 'system' -%}{%- set sys = text(messages[0].content) -%}"
        "{%- else -%}{%- set sys = '' -%}{%- endif -%}",
        "{%- if tools -%}",
        "<|im_start|>system{{ nl }}{%- if sys -%}{{ sys }}{{ nl }}{{ nl }}{%- endif -%}",
        "# Tools{{ nl }}Call a tool by writing <tool_call>{{ nl }}"
        '{"name": <name>, "arguments": <json object>}{{ nl }}</tool_call>{{ nl }}<tools>{{ nl }}',
        "{%- for t in tools -%}{{ (t.function if t.function is defined else t) | tojson }}{{ nl }}{%- endfor -%}",
        "</tools><|im_end|>{{ nl }}",
        "{%- elif sys -%}<|im_start|>system{{ nl }}{{ sys }}<|im_end|>{{ nl }}",
        "{%- endif -%}",
        "{%- for m in messages -%}",
        "{%- if m.role == 'system' and loop.first -%}",
        "{%- elif m.role == 'assistant' -%}",
        "<|im_start|>assistant{{ nl }}{{ text(m.content) }}",
        "{%- for tc in (m.tool_calls or []) -%}{%- set f = tc.function if tc.function is defined else tc -%}",
        '<tool_call>{{ nl }}{"name": "{{ f.name }}", "arguments": '
        "{%- if f.arguments is string %} {{ f.arguments }}{%- else %} {{ f.arguments | tojson }}{%- endif -%}"
        "}{{ nl }}</tool_call>",
        "{%- endfor -%}",
        "<|im_end|>{{ nl }}",
        "{%- else -%}",
        "<|im_start|>{{ m.role }}{{ nl }}{{ text(m.content) }}<|im_end|>{{ nl }}",
        "{%- endif -%}",
        "{%- endfor -%}",
        "{%- if add_generation_prompt -%}<|im_start|>assistant{{ nl }}{%- endif -%}",
    ]
)


# MOCK_CHAT_RULES=qwen3: the same template with Qwen3's THINKING rules, in the published template's own
# expressions (tests/fixtures/chat_templates/qwen3.jinja), so stack/serving/template_fix.py derives from it exactly as
# from Qwen3's and the CPU form forks where a GPU would: a history turn's think block is rendered only after
# the last user message, and (as published) only when it has reasoning; text before a call is followed by the
# template's own newline; thinking off (enable_thinking false) closes an empty think block in the generation
# prompt. The system, tool and user turns stay the mock's (the learnable policy was tuned on them; a first
# turn renders the same under both rules).
QWEN3_RULES_TEMPLATE = "".join(
    [
        CHAT_TEMPLATE.split("{%- for m in messages -%}")[0],
        "{%- set ns = namespace(last_query_index=messages|length - 1, found=false) -%}",
        "{%- for m in messages[::-1] -%}{%- if not ns.found and m.role == 'user' -%}"
        "{%- set ns.found = true -%}{%- set ns.last_query_index = messages|length - 1 - loop.index0 -%}"
        "{%- endif -%}{%- endfor -%}",
        "{%- for message in messages -%}",
        "{%- if message.role == 'system' and loop.first -%}",
        "{%- elif message.role == 'assistant' -%}",
        "{%- set content = text(message.content) -%}",
        "{%- set reasoning_content = '' -%}",
        "{%- if message.reasoning_content is string -%}{%- set reasoning_content = message.reasoning_content -%}",
        "{%- elif '</think>' in content -%}",
        "{%- set reasoning_content = content.split('</think>')[0].rstrip(nl).split('<think>')[-1].lstrip(nl) -%}",
        "{%- set content = content.split('</think>')[-1].lstrip(nl) -%}",
        "{%- endif -%}",
        "{%- if loop.index0 > ns.last_query_index -%}",
        "{%- if loop.last or (not loop.last and reasoning_content) -%}",
        "<|im_start|>assistant{{ nl }}<think>{{ nl }}{{ reasoning_content.strip(nl) }}{{ nl }}</think>{{ nl }}"
        "{{ nl }}{{ content.lstrip(nl) }}",
        "{%- else -%}<|im_start|>assistant{{ nl }}{{ content }}{%- endif -%}",
        "{%- else -%}<|im_start|>assistant{{ nl }}{{ content }}{%- endif -%}",
        "{%- for tc in (message.tool_calls or []) -%}",
        "{%- if (loop.first and content) or (not loop.first) -%}{{ nl }}{%- endif -%}",
        "{%- set f = tc.function if tc.function is defined else tc -%}",
        '<tool_call>{{ nl }}{"name": "{{ f.name }}", "arguments": '
        "{%- if f.arguments is string %} {{ f.arguments }}{%- else %} {{ f.arguments | tojson }}{%- endif -%}"
        "}{{ nl }}</tool_call>",
        "{%- endfor -%}",
        "<|im_end|>{{ nl }}",
        "{%- else -%}",
        "<|im_start|>{{ message.role }}{{ nl }}{{ text(message.content) }}<|im_end|>{{ nl }}",
        "{%- endif -%}",
        "{%- endfor -%}",
        "{%- if add_generation_prompt -%}<|im_start|>assistant{{ nl }}"
        "{%- if enable_thinking is defined and enable_thinking is false -%}"
        "<think>{{ nl }}{{ nl }}</think>{{ nl }}{{ nl }}{%- endif -%}{%- endif -%}",
    ]
)
RULES = {"chatml": CHAT_TEMPLATE, "qwen3": QWEN3_RULES_TEMPLATE}


def build_tokenizer():
    """A transformers fast tokenizer (saved with save_pretrained, loaded with AutoTokenizer)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.normalizer = normalizers.Replace(Regex(r"[^\t\n\x20-\x7e]"), "?")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=EOS,
        pad_token=PAD,
        bos_token=None,
        additional_special_tokens=[BOS],
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 20,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
