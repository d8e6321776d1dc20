"""A package's front door, opened lazily: what it exports is imported on first use.

A package others use names what they may take in `__all__`, and imports each of those names
under `if TYPE_CHECKING:` (so type checkers and readers see where it lives); its module
`__getattr__` is `door(__name__)`, which imports a name's home the first time it is asked for.
Nothing is imported when the package is: some packages' `__init__` must stay free of
imports, because processes that run on the standard library alone import modules below it
(the local sandbox's fork server) or only part of the service is there (the capture proxy
inside a remote sandbox). Standard library only, for the same reason.

    if TYPE_CHECKING:
        from service.proxy.capture.gate import CallGate
    __all__ = ["CallGate"]
    __getattr__ = door(__name__)

`tests/test_layering.py` holds every module outside a package to its door.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["door"]


def door(package: str) -> Callable[[str], object]:
    """The module `__getattr__` of `package`: each name of its `__all__` imported under its
    `if TYPE_CHECKING:` is imported from its home when first asked for, then kept on the
    package. Call it after `__all__`."""
    module = sys.modules[package]
    exported = set(getattr(module, "__all__", ()))
    homes = {
        name: home
        for name, home in _homes(Path(module.__file__ or ""), package).items()
        if name in exported
    }

    def attribute(name: str) -> object:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        home, original = homes[name]
        value = getattr(importlib.import_module(home), original)
        setattr(module, name, value)
        return value

    return attribute


def _homes(path: Path, package: str) -> dict[str, tuple[str, str]]:
    """Name -> (the module it is imported from under the package's `if TYPE_CHECKING:`, its
    name there)."""
    homes: dict[str, tuple[str, str]] = {}
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom):
                    home = importlib.util.resolve_name(
                        "." * statement.level + (statement.module or ""), package
                    )
                    for alias in statement.names:
                        homes[alias.asname or alias.name] = (home, alias.name)
    return homes
