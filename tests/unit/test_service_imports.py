"""Issue 38's done-when: nothing under services/ imports another service's package except through `stack`.

Each service runs from its own image, which copies `stack` and its own package (images/*/Dockerfile): an import
of another service's package either crashes in an image that lacks it, or forces the image to carry that
service too. What two services really share lives in services/stack/ (readers/, serving/, sizing/, ...).
Relative imports stay inside their package; stack itself may import no service."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = sorted(p.name for p in (ROOT / "services").iterdir() if (p / "__init__.py").is_file())
SHARED = "stack"


def _imports(path: Path):
    """(line, module) for each absolute import in `path`: `import a.b` gives a.b, `from a.b import c` gives a.b."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def cross_service_imports() -> list[str]:
    """`file:line imports module (service X)` for each import of another service's package but stack's."""
    found: list[str] = []
    for service in SERVICES:
        for path in sorted((ROOT / "services" / service).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, module in _imports(path):
                other = module.split(".")[0]
                if other in SERVICES and other not in (service, SHARED):
                    found.append(f"{rel}:{line} imports {module} (service {other})")
    return found


def test_no_service_imports_another_services_package_but_stack():
    found = cross_service_imports()
    assert not found, "move what both need into services/stack/:\n" + "\n".join(found)
