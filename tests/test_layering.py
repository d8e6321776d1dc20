"""Layers point one way (STYLE.md): a room of `service/` imports only rooms on lower levels.

    level  rooms                                        what they are
    10     server                                       wires everything and serves
    9      dashboard, openenv                           the web dashboard, on the API; the
                                                        OpenEnv front door, a gRPC client
    8      api                                          the gRPC edge: proto <-> domain
    7      engine                                       the lifecycle, the manager, groups
    6      registry                                     name -> backend or harness (lazy)
    5      agents, proxy, verifier, harbor              each on its own: never one another
    4      sandboxes                                    the `Sandbox` protocol and backends
    3      images, store, telemetry                     what a sandbox, the engine, ... use
    2      config, listen_address, file_lock, memory,   settings and small host facilities
           user_namespace, host_python
    1      errors                                       the one exception hierarchy
    0      models                                       the pydantic domain: imports nothing

Rooms on one level never import each other: what two of them share lives below both (a
model type in `models`, like `ModelAccess`, which the proxy makes and the harnesses read;
the local sandbox's forwarder in `sandboxes.local`). Read from the source, so a lazy import
inside a function, or one only for type checking, counts. No module may import, through any
chain, a module that imports it back (a cycle hides which way a dependency points).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import rollout_client

import service

SERVICE = Path(service.__file__).parent
LEVELS: tuple[tuple[str, ...], ...] = (
    ("models",),
    ("errors",),
    ("config", "listen_address", "file_lock", "memory", "user_namespace", "host_python"),
    ("images", "store", "telemetry"),
    ("sandboxes",),
    ("agents", "proxy", "verifier", "harbor"),
    ("registry",),
    ("engine",),
    ("api",),
    ("dashboard", "openenv"),
    ("server",),
)
LEVEL_OF = {room: level for level, rooms in enumerate(LEVELS) for room in rooms}


def _modules(package: Path = SERVICE) -> dict[str, Path]:
    """Every module of the service (or `package`) by dotted name (a package by its own name)."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


MODULES = _modules()


def _imports(name: str, path: Path, modules: Mapping[str, Path] = MODULES) -> Iterator[str]:
    """The modules `name` imports (`from a import b` is `a.b` when b is one of `modules`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base


def _room(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


GRAPH = {
    name: {m for m in _imports(name, path) if m in MODULES and m != name}
    for name, path in MODULES.items()
}
"""Module -> the service modules it imports."""


def test_every_room_has_a_level() -> None:
    rooms = {_room(name) for name in MODULES} - {""}
    assert len(rooms) > 10  # the package was found
    assert rooms == set(LEVEL_OF), "a new room needs its level in LEVELS (and the docs' table)"


@pytest.mark.parametrize("room", sorted(LEVEL_OF))
def test_a_room_imports_only_lower_levels(room: str) -> None:
    upward = sorted(
        f"{name} imports {imported} (level {LEVEL_OF[_room(imported)]})"
        for name, imported_modules in GRAPH.items()
        if _room(name) == room
        for imported in imported_modules
        if _room(imported) not in ("", room) and LEVEL_OF[_room(imported)] >= LEVEL_OF[room]
    )
    assert not upward, f"{room} is on level {LEVEL_OF[room]}"


def test_the_openenv_front_door_imports_no_other_room() -> None:
    """It reaches the server over gRPC (rollout_client) like any caller, never in-process."""
    reached = sorted(
        f"{name} imports {imported}"
        for name, imported_modules in GRAPH.items()
        if _room(name) == "openenv"
        for imported in imported_modules
        if _room(imported) != "openenv"
    )
    assert not reached


def test_no_module_imports_itself_through_others() -> None:
    cycles: list[str] = []
    done: set[str] = set()
    for start in sorted(GRAPH):
        _walk(start, GRAPH, [], set(), done, cycles)
    assert not cycles


def _walk(
    node: str,
    graph: dict[str, set[str]],
    path: list[str],
    on_path: set[str],
    done: set[str],
    cycles: list[str],
) -> None:
    """Depth first from `node`, recording each import that leads back onto the path."""
    if node in done:
        return
    path.append(node)
    on_path.add(node)
    for imported in sorted(graph[node]):
        if imported in on_path:
            cycles.append(" -> ".join([*path[path.index(imported) :], imported]))
        else:
            _walk(imported, graph, path, on_path, done, cycles)
    path.pop()
    on_path.discard(node)
    done.add(node)


# The client (rollout_client, the distribution rollout-client) stands alone: it never imports
# the server, which it runs only as a process of its own (`rollout serve`, `--local`), and its
# modules import one another one way only. Kept apart from the service's rules above.

CLIENT = Path(rollout_client.__file__).parent
CLIENT_MODULES = _modules(CLIENT)
CLIENT_IMPORTS = {
    name: set(_imports(name, path, CLIENT_MODULES)) for name, path in CLIENT_MODULES.items()
}
"""Client module -> every module it imports (the client's own, and any other)."""


def _imported_by_name(path: Path) -> Iterator[str]:
    """Modules named to `importlib.import_module` by a constant string."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value


def test_the_client_never_imports_the_server() -> None:
    assert len(CLIENT_MODULES) > 20  # the package was found
    reached = sorted(
        f"{name} imports {imported}"
        for name, path in CLIENT_MODULES.items()
        for imported in CLIENT_IMPORTS[name] | set(_imported_by_name(path))
        if imported == "service" or imported.startswith("service.")
    )
    assert not reached


def test_no_client_module_imports_itself_through_others() -> None:
    graph = {
        name: {m for m in imported if m in CLIENT_MODULES and m != name}
        for name, imported in CLIENT_IMPORTS.items()
    }
    cycles: list[str] = []
    done: set[str] = set()
    for start in sorted(graph):
        _walk(start, graph, [], set(), done, cycles)
    assert not cycles


def test_the_batch_library_has_no_command_line_in_it() -> None:
    """`rollout batch` (typer) sits on the library, never in it."""
    reached = sorted(
        f"{name} imports {imported}"
        for name, imported_modules in CLIENT_IMPORTS.items()
        if name.startswith("rollout_client.batch.") or name == "rollout_client.batch"
        for imported in imported_modules
        if imported == "typer" or imported.startswith(("typer.", "rollout_client.batch_"))
    )
    assert not reached
