"""The proxy packed for a remote sandbox carries every module of `service` its start imports:
a module the proxy starts importing (as `service.listen_address` once was) must join the
bundle, or every remote rollout fails as its proxy starts."""

from __future__ import annotations

import ast
from pathlib import Path

import service
from service.proxy.remote.bundle import source_files

_ENTRY = "service.proxy.remote.standalone"


def _runtime_imports(tree: ast.Module) -> set[str]:
    """Modules imported when the module runs, `if TYPE_CHECKING:` blocks left out."""
    skipped = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for child in ast.walk(statement)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _file(module: str) -> Path | None:
    base = Path(service.__file__).resolve().parent.parent / module.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _closure(entry: str) -> set[str]:
    """The `service` modules importing `entry` imports, with their packages."""
    seen: set[str] = set()
    pending = [entry]
    while pending:
        module = pending.pop()
        if module in seen or not (module == "service" or module.startswith("service.")):
            continue
        path = _file(module)
        if path is None:  # a name imported from a module, not a module
            continue
        seen.add(module)
        parts = module.split(".")
        pending += [".".join(parts[:depth]) for depth in range(1, len(parts))]
        pending += _runtime_imports(ast.parse(path.read_text()))
    return seen


def test_the_bundle_carries_every_service_module_the_proxy_imports() -> None:
    carried = set(source_files())
    needed = {
        str(path.relative_to(Path(service.__file__).resolve().parent.parent))
        for module in _closure(_ENTRY)
        if (path := _file(module)) is not None
    }
    assert needed - carried == set()
    assert "service/door.py" in needed  # the closure follows the packages' own imports
