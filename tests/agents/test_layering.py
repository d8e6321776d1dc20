"""A harness never imports the engine or the API (STYLE.md: layers point down only).

What the agents share with the engine (SOLUTION_DIR, `in_workdir`) lives below both, in
`service.sandboxes.base`. Read from the source, so a lazy import inside a function counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import service.agents

AGENTS = Path(service.agents.__file__).parent
HIGHER = ("service.engine", "service.api")


def _imported(module: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text(), str(module))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_no_harness_imports_a_higher_layer() -> None:
    modules = sorted(AGENTS.glob("*.py"))
    assert len(modules) > 10  # the package was found

    upward = {
        f"{module.name}: {name}"
        for module in modules
        for name in _imported(module)
        if any(name == higher or name.startswith(f"{higher}.") for higher in HIGHER)
    }

    assert not upward
