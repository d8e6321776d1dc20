"""Layers point one way, and a room is entered by its front door.

Levels: a room of `service/` imports only rooms on lower levels.

    level  rooms                                        what they are
    11     server                                       wires everything and serves
    10     dashboard, openenv                           the web dashboard, on the API; the
                                                        OpenEnv front door, a gRPC client
    9      api                                          the gRPC edge: proto <-> domain
    8      engine                                       the lifecycle, the manager, groups
    7      registry                                     name -> backend or harness (lazy)
    6      agents, proxy, verifier, harbor              each on its own: never one another
    5      sandboxes                                    the `Sandbox` protocol and backends
    4      images, store, telemetry                     what a sandbox, the engine, ... use
    3      config, file_lock, memory, user_namespace,   settings and small host facilities
           host_python
    2      listen_address                               HOST:PORT, read and written once
    1      errors                                       the one exception hierarchy
    0      models, door                                 the pydantic domain; lazy doors

Rooms on one level never import each other: what two of them share lives below both (a model
type in `models`, like `ModelAccess`, which the proxy makes and the harnesses read; the
local sandbox's forwarder in `sandboxes.local`). Floors: inside `engine`, `proxy` and
`sandboxes` the same rule holds between their parts (FLOORS). Doors: a module of another
room, or of `testing/`, `bench/` or `scripts/`, takes from a room only what the room's
`__init__` exports in `__all__` (a subpackage is reached through its parent's door, so it
must be exported there too); what a room keeps to itself can change without its users
noticing. The same holds for the service's use of the client: only what `rollout_client`
exports. `testing/`, `bench/` and `scripts/` import nothing of `tests/`: what tests and
benchmarks both need lives in `testing/`. Read from the source, so a lazy import inside a
function, or one only for type checking, counts. No module may import, through any chain, a
module that imports it back (a cycle hides which way a dependency points).
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import rollout_client

import service
from service import registry

ROOT = Path(service.__file__).parent.parent
TREES = ("service", "testing", "bench", "scripts")
"""The trees whose imports are read (`tests/` imports what it tests)."""
LEVELS: tuple[tuple[str, ...], ...] = (
    ("models", "door"),
    ("errors",),
    ("listen_address",),
    ("config", "file_lock", "memory", "user_namespace", "host_python"),
    ("images", "store", "telemetry"),
    ("sandboxes",),
    ("agents", "proxy", "verifier", "harbor"),
    ("registry",),
    ("engine",),
    ("api",),
    ("dashboard", "openenv"),
    ("server",),
)
FLOORS: dict[str, tuple[tuple[str, ...], ...]] = {
    "service.sandboxes": (
        ("base",),
        ("output", "deadline", "carry", "prestart", "seal", "internet"),
        ("local", "e2b"),
    ),
    "service.proxy": (
        ("transport", "endpoints"),
        ("capture",),
        ("dialects", "access"),
        ("core",),
        ("server", "remote"),
    ),
    "service.engine": (
        ("task_paths", "call_rules", "feed", "collect", "output_cap", "output_scrub"),
        ("admission", "remote_cancel", "live_rollout"),
        ("task_extras", "model_calls", "events", "idempotency"),
        ("staging", "validation"),
        ("template",),  # setup's state, prepared once: the phase machine, groups and sessions
        ("verification",),
        ("lifecycle",),
        ("model_access",),
        ("checks",),
        ("recovery",),
        ("manager",),
        ("groups",),
        ("sessions",),
    ),
}
"""A room's parts, lowest floor first, by their dotted name inside the room (the longest
that names a module counts)."""


def _package_modules(package: Path) -> dict[str, Path]:
    """Every module of `package` by dotted name (a package by its own name)."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _modules() -> dict[str, Path]:
    """Every module of TREES by dotted name."""
    return {name: path for tree in TREES for name, path in _package_modules(ROOT / tree).items()}


MODULES = _modules()
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def _imports(name: str, path: Path, source: str | None = None) -> Iterator[tuple[str, str]]:
    """(module, name) of each name `name` imports: `import a.b` is ("a", "b"), `from a import
    b` is ("a", "b") and `from a.b import *` is ("a.b", "*"). Read from `path`, or `source`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    text = path.read_text() if source is None else source
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parent, _, last = alias.name.rpartition(".")
                yield parent, last
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            yield from ((base, alias.name) for alias in node.names)


IMPORTS = {name: set(_imports(name, path)) for name, path in MODULES.items()}
"""Module -> the (module, name) pairs it imports."""


def _target(module: str, name: str, modules: Mapping[str, Path] = MODULES) -> str:
    """The module an import reaches: `from a import b` is `a.b` when b is one of `modules`."""
    return f"{module}.{name}" if f"{module}.{name}" in modules else module


GRAPH = {
    name: {t for t in (_target(*pair) for pair in pairs) if t in MODULES and t != name}
    for name, pairs in IMPORTS.items()
}
"""Module -> the modules of TREES it imports."""


def _room(module: str) -> str:
    return module.split(".")[1] if module.startswith("service.") else ""


def _part(room: str, module: str) -> str:
    """The part of `room` that `module` belongs to: the longest name of FLOORS[room] it is in."""
    inside = module.removeprefix(room + ".").split(".") if module.startswith(room + ".") else []
    parts = {part for floor in FLOORS[room] for part in floor}
    return next(
        (".".join(inside[:n]) for n in range(len(inside), 0, -1) if ".".join(inside[:n]) in parts),
        inside[0] if inside else "",
    )


def _upward(
    graph: dict[str, set[str]], where: dict[str, int], place: dict[str, str]
) -> Iterator[str]:
    """Each import of a module into a place on its own level or above (`where`: place -> level,
    `place`: module -> its place, "" for none that counts)."""
    for name, imported_modules in graph.items():
        for imported in imported_modules:
            mine, theirs = place[name], place[imported]
            if mine and theirs and mine != theirs and where[theirs] >= where[mine]:
                yield f"{name} imports {imported} (level {where[theirs]} >= {where[mine]})"


def _levels(floors: tuple[tuple[str, ...], ...]) -> dict[str, int]:
    return {place: level for level, places in enumerate(floors) for place in places}


SERVICE = {name: imported for name, imported in GRAPH.items() if name.startswith("service.")}


def test_every_room_has_a_level() -> None:
    rooms = {_room(name) for name in SERVICE} - {""}
    assert len(rooms) > 10  # the package was found
    assert rooms == set(_levels(LEVELS)), "a new room needs its level in LEVELS (and the docs')"


@pytest.mark.parametrize("room", sorted(_levels(LEVELS)))
def test_a_room_imports_only_lower_levels(room: str) -> None:
    place = {name: _room(name) for name in MODULES}
    mine = {name: imported for name, imported in SERVICE.items() if place[name] == room}
    upward = sorted(_upward(mine, _levels(LEVELS), place))
    assert not upward, f"{room} is on level {_levels(LEVELS)[room]}"


@pytest.mark.parametrize("room", sorted(FLOORS))
def test_every_part_of_a_room_has_a_floor(room: str) -> None:
    parts = {_part(room, name) for name in MODULES if name.startswith(room + ".")}
    assert parts == set(_levels(FLOORS[room])), "a new part needs its floor in FLOORS"


@pytest.mark.parametrize("room", sorted(FLOORS))
def test_a_floor_imports_only_lower_floors(room: str) -> None:
    place = {name: _part(room, name) for name in MODULES}
    inside = {
        name: {imported for imported in modules if imported.startswith(room + ".")}
        for name, modules in SERVICE.items()
        if name.startswith(room + ".")
    }
    upward = sorted(_upward(inside, _levels(FLOORS[room]), place))
    assert not upward


def test_the_openenv_front_door_imports_no_other_room() -> None:
    """It reaches the server over gRPC (rollout_client) like any caller, never in-process."""
    reached = sorted(
        f"{name} imports {imported}"
        for name, imported_modules in SERVICE.items()
        if _room(name) == "openenv"
        for imported in imported_modules
        if _room(imported) != "openenv"
    )
    assert not reached


def _exports(package: str, modules: Mapping[str, Path] = MODULES) -> frozenset[str]:
    """What `package`'s `__init__` lists in `__all__` (read from the source)."""
    for node in ast.parse(modules[package].read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return frozenset(ast.literal_eval(node.value))
    return frozenset()


def _through_doors(importer: str, module: str, name: str) -> Iterator[str]:
    """The door that `from module import name`, from another room, passes without being let
    in: the room and each subpackage on the way must export the next step (a subpackage,
    or the name). Inside a room, FLOORS hold its parts apart."""
    if _room(module) in ("", _room(importer)):
        return
    steps = [*module.split("."), name]
    for depth in range(2, len(steps)):
        package = ".".join(steps[:depth])
        if package in PACKAGES and steps[depth] not in _exports(package):
            yield f"{importer} takes {steps[depth]} from {package}, which does not export it"
            return


@pytest.mark.parametrize("tree", TREES)
def test_a_package_is_entered_by_its_door(tree: str) -> None:
    """The service's own rooms, and the support package, the benchmarks and the scripts that
    use them (a module of none of its rooms) alike."""
    pairs_of_tree = {name: pairs for name, pairs in IMPORTS.items() if name.startswith(tree + ".")}
    assert any(m.startswith("service.") for pairs in pairs_of_tree.values() for m, _ in pairs)
    past_doors = sorted(
        problem
        for importer, pairs in pairs_of_tree.items()
        for module, name in pairs
        if module.startswith("service.")
        for problem in _through_doors(importer, module, name)
    )
    assert not past_doors


def test_the_door_check_sees_each_way_past_a_door() -> None:
    """A module of no room (a benchmark, say) is held like one of another room; inside its
    own room a module reaches any part (FLOORS keep those apart)."""

    def past(importer: str, source: str) -> list[str]:
        imported = _imports(importer, Path("module.py"), source)
        return sorted(p for m, n in imported for p in _through_doors(importer, m, n))

    assert past("bench.b", "from service.sandboxes import Sandbox") == []
    assert past("bench.b", "from service.sandboxes.local.backend import LocalBackend") == [
        "bench.b takes local from service.sandboxes, which does not export it"
    ]
    assert past("bench.b", "import service.sandboxes.base") == [
        "bench.b takes base from service.sandboxes, which does not export it"
    ]
    assert past("testing.t", "from service.proxy.transport.upstream import UpstreamPool") == [
        "testing.t takes transport from service.proxy, which does not export it"
    ]
    assert past("service.sandboxes.x", "from service.sandboxes.local.backend import A") == []
    assert past("service.engine.x", "from service.sandboxes.base import Sandbox") == [
        "service.engine.x takes base from service.sandboxes, which does not export it"
    ]


DOORS = sorted(p for p in PACKAGES if p.startswith("service.") and _exports(p))


@pytest.mark.parametrize("package", DOORS)
def test_every_exported_name_is_there(package: str) -> None:
    imported = importlib.import_module(package)
    missing = [name for name in sorted(_exports(package)) if not hasattr(imported, name)]
    assert not missing


@pytest.mark.parametrize("tree", ["testing", "bench", "scripts"])
def test_support_bench_and_scripts_import_nothing_of_the_tests(tree: str) -> None:
    reached = sorted(
        f"{importer} imports {module}"
        for importer, pairs in IMPORTS.items()
        if importer.startswith(tree + ".")
        for module, _ in pairs
        if module == "tests" or module.startswith("tests.")
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
CLIENT_MODULES = _package_modules(CLIENT)
CLIENT_IMPORTS = {
    name: {_target(module, imported, CLIENT_MODULES) for module, imported in _imports(name, path)}
    for name, path in CLIENT_MODULES.items()
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


def test_the_service_takes_from_the_client_only_what_it_exports() -> None:
    """The OpenEnv front door is one more caller: it uses what `rollout_client` exports,
    never a module of the client, which can change without its callers noticing."""
    offered = _exports("rollout_client", CLIENT_MODULES)
    taken = {
        (name, module, imported)
        for name, pairs in IMPORTS.items()
        if name.startswith("service.")
        for module, imported in pairs
        if module == "rollout_client" or module.startswith("rollout_client.")
    }
    assert taken  # the front door's imports were found
    past_door = sorted(
        f"{name} takes {imported} from {module}"
        for name, module, imported in taken
        if module != "rollout_client" or imported not in offered
    )
    assert not past_door


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


BACKEND_NAMES = frozenset(registry.BACKENDS)
NAMED_BY_NAME = {"service.registry", "service.config"}
"""Where a backend may be known by its name: the registry maps names to backends, and the
settings name the default one. Everywhere else asks the backend's `Capabilities`."""


def _backend_name_matches(source: str) -> Iterator[tuple[int, str]]:
    """(line, name) of each place `source` matches a backend by its name: compared
    (`== "e2b"`, `in`), matched (`case "local":`) or listed in a set, list or tuple."""

    def named(node: ast.expr) -> str | None:
        value = node.value if isinstance(node, ast.Constant) else None
        return value if isinstance(value, str) and value in BACKEND_NAMES else None

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands: list[ast.expr] = [node.left, *node.comparators]
        elif isinstance(node, ast.MatchValue):
            operands = [node.value]
        elif isinstance(node, ast.Set | ast.List | ast.Tuple):
            operands = list(node.elts)
        else:
            continue
        for operand in operands:
            if (name := named(operand)) is not None:
                yield operand.lineno, name


def test_no_module_matches_a_backend_by_its_name() -> None:
    """What a backend can do is data it declares (`Capabilities`), never guessed from its
    name, so a new backend needs no edit elsewhere (`_HOST_SOCKET_BACKENDS = {"local"}` and
    `== "e2b"` in the engine and the Harbor tasks were such guesses)."""
    assert {"local", "e2b"} <= BACKEND_NAMES
    found = sorted(
        f"{path.relative_to(ROOT)}:{line} matches {name!r}"
        for module, path in MODULES.items()
        if module.startswith("service.") and module not in NAMED_BY_NAME
        for line, name in _backend_name_matches(path.read_text())
    )
    assert not found


def test_the_name_check_sees_each_way_of_matching() -> None:
    source = (
        "HOST = {'local'}\n"
        "def f(backend, name):\n"
        "    if backend == 'e2b' or name in ('local',):\n"
        "        return 1\n"
        "    match name:\n"
        "        case 'e2b':\n"
        "            return 2\n"
        "    return {'environment_class': 'local'}, g(default_type='local')\n"
    )
    assert sorted(_backend_name_matches(source)) == [
        (1, "local"),
        (3, "e2b"),
        (3, "local"),
        (6, "e2b"),
    ]
