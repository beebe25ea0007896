"""A tunnel provider's or a weight transfer's name is compared only in stack/backends.py: everywhere else code asks
the registry entry for the trait it needs (needs_direct_url, serves_bfloat16, version_route, ...), so a new provider
or transfer is one entry, not a hunt for every `== "cloudflared"`."""

from __future__ import annotations

import re
from pathlib import Path

from stack.backends import TUNNEL_PROVIDERS, WEIGHT_TRANSFERS

SERVICES = Path(__file__).resolve().parents[3] / "services"
NAMES = sorted({*TUNNEL_PROVIDERS.names, *TUNNEL_PROVIDERS.aliases, *WEIGHT_TRANSFERS.names})
QUOTED = "|".join(f"['\"]{re.escape(name)}['\"]" for name in NAMES)
COMPARED = re.compile(
    rf"[=!]=\s*(?:{QUOTED})"  # x == "nccl"
    rf"|(?:{QUOTED})\s*[=!]="  # "nccl" == x
    rf"|\bin\s*[(\[{{][^)\]}}]*(?:{QUOTED})"  # x in ("nccl", "ipc")
    rf"|[{{]\s*(?:{QUOTED})\s*:"  # {"mock": ...}.get(x)
    rf"|\bcase\s+(?:{QUOTED})"  # match x: case "nccl"
)


def comparisons(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if COMPARED.search(line)]


def test_no_provider_or_transfer_name_is_compared_outside_the_registry():
    found = []
    for path in sorted(SERVICES.rglob("*.py")):
        if path.relative_to(SERVICES).as_posix() == "stack/backends.py":
            continue
        found += [f"{path.relative_to(SERVICES)}: {line}" for line in comparisons(path.read_text())]
    assert not found, "ask the registry entry (stack/backends.py) for a trait instead:\n" + "\n".join(found)


def test_the_pattern_catches_each_form_of_comparison():
    for line in (
        'if provider == "cloudflared":',
        "if 'direct' != tunnel_provider:",
        'if mode in ("nccl", "ipc"):',
        'return {"mock": "compose-cpu"}.get(mode)',
        'case "gradio":',
    ):
        assert comparisons(line), line
    # Names as values, or inside a page's text, are not comparisons.
    assert not comparisons('if "gradio" in lower or "frp" in lower:')
    assert not comparisons('TunnelProvider("direct", "DIRECT_URL the sandbox can already route to")')
