"""Where a no-op rollout's CPU goes: by process and by phase, against the sandbox's floor.

A real server subprocess (the defaults: disk quota, FRESH verification) runs no-op
rollouts (setup `true`, agent `true`, verify `true`); the server and everything it starts
are moved into a cpuacct cgroup (`bench_rollouts.TreeCpu`), whose usage is the whole
cost, kernel work on their behalf included. It is split by process, each from what the
kernel counts for it:

    server: event loop         the main thread (/proc/<server>/task/<server>/stat)
    server: Python threads     the other threads named python (executor, SQLite writer)
    server: gRPC core threads  the threads gRPC's C core names (event_engine, ...)
    server: reaped children    what the server waited for (cutime + cstime): `cp` of the
                               FRESH snapshots, `mount`, ...
    fork server                its own utime + stime (it ignores SIGCHLD: its spawners'
                               time reaches no parent)
    sandboxes                  the rest of the cgroup: spawners, bwrap, holders, the
                               commands; split below by sampling /proc every 2 ms
                               in the by-phase pass (a lower bound each: a process's
                               last 2 ms, and processes shorter than that, are not seen)

and by phase: a rollout at a time, the cgroup read at each phase event the bench
watches (WatchRollout), and again 0.3 s after the result (the reaper, the warm pool's
refill). Each figure is the median of `--repeats` runs, with their min-max. The floor is
`bench_sandbox`'s sandbox life (create, exec `true`, kill) measured for CPU the same way,
in this process: a FRESH no-op rollout needs two sandboxes (the agent's, taken warm, and
the verifier's, made from setup's state).

    python bench/bench_rollout_cpu.py [--rollouts 100] [--repeats 3] [--vs ../main]

`--vs` runs a baseline checkout's server too, interleaved with this tree's, and prints the
ratios of the headline figures, same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from bench.bench_rollouts import TreeCpu, _descendants, noop_spec, run_batch
from bench.bench_sandbox import sandbox_life
from service.config import Settings
from service.sandboxes import LocalBackend
from testing.server_process import ServerProcess

RESULTS = Path(__file__).parent / "results"
_TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")
_SAMPLE_S = 0.002
_AFTER_RESULT_S = 0.3
Figures = dict[str, float]
Run = dict[str, Figures]
"""One server's figures: c1 and c16 by process, phases, the sandboxes sampled."""


def _stat(path: Path) -> list[str]:
    """The fields of a /proc stat file after the command name (field 3 first)."""
    return path.read_text().rsplit(")", 1)[1].split()


def _comm(path: Path) -> str:
    text = path.read_text()
    return text[text.index("(") + 1 : text.rindex(")")]


def _ms(fields: list[str], first: int) -> float:
    """utime + stime (first=11) or cutime + cstime (first=13), in ms."""
    return (int(fields[first]) + int(fields[first + 1])) * _TICK_MS


class Meter:
    """Cumulative CPU (ms) of the server's processes, split as the module docstring says."""

    def __init__(self, server: int, tree: TreeCpu) -> None:
        self.server = server
        self.tree = tree
        children = [pid for pid in _descendants(server) if pid != server]
        self.fork_server = min(children)  # started first, before any spawner

    def total(self) -> float:
        used = self.tree.ms()
        assert used is not None, "needs a cpuacct cgroup (v1) and root"
        return used

    def read(self) -> Figures:
        proc = Path(f"/proc/{self.server}")
        server = _stat(proc / "stat")
        threads = {"server: event loop": 0.0, "server: Python threads": 0.0}
        threads["server: gRPC core threads"] = 0.0
        for task in (proc / "task").iterdir():
            try:
                own = _ms(_stat(task / "stat"), 11)
                name = _comm(task / "stat")
            except OSError:
                continue  # a thread that just ended: its time is in the process's
            if int(task.name) == self.server:
                threads["server: event loop"] += own
            elif name == "python":
                threads["server: Python threads"] += own
            else:
                threads["server: gRPC core threads"] += own
        total = self.total()
        figures = {
            **threads,
            "server: ended threads": _ms(server, 11) - sum(threads.values()),
            "server: reaped children": _ms(server, 13),
            "fork server": _ms(_stat(Path(f"/proc/{self.fork_server}/stat")), 11),
        }
        figures["sandboxes (spawners, bwrap, holders, commands)"] = total - sum(figures.values())
        figures["total"] = total
        return figures


def _minus(after: Figures, before: Figures, count: int) -> Figures:
    return {key: (after[key] - before[key]) / count for key in after}


class Sampler:
    """The sandboxes' processes (the fork server's descendants) by role, from /proc every
    2 ms in a thread: each pid's last time on a CPU seen (schedstat, in ns: utime and
    stime count 10 ms ticks), a lower bound. Only pids new
    since the last round are read for their parent, so a round costs a listing of /proc
    and a read per live sandbox process."""

    def __init__(self, fork_server: int) -> None:
        self._fork_server = fork_server
        self._known = _pids()
        self._roles: dict[int, str] = {}
        self._seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(_SAMPLE_S):
            live = _pids()
            for pid in sorted(live - self._known):  # parents before children, mostly
                with contextlib.suppress(OSError, ValueError):
                    self._classify(pid)
            self._known = live
            for pid in self._roles.keys() & live:
                with contextlib.suppress(OSError, ValueError):
                    ran_ns = Path(f"/proc/{pid}/schedstat").read_text().split()[0]
                    self._seen[pid] = int(ran_ns) / 1e6

    def _classify(self, pid: int) -> None:
        """A spawner is the fork server's child; its first bwrap builds the namespaces,
        the second is their init, whose child is the holder; the rest are commands (and,
        forked from a spawner before they exec, python)."""
        parent = int(_stat(Path(f"/proc/{pid}/stat"))[1])
        name = _comm(Path(f"/proc/{pid}/stat"))
        if parent == self._fork_server:
            self._roles[pid] = "spawner"
        elif parent in self._roles:
            above = self._roles[parent]
            if name == "bwrap":
                self._roles[pid] = "bwrap (init)" if above.startswith("bwrap") else "bwrap"
            elif above == "bwrap (init)":
                self._roles[pid] = "holder"
            else:
                self._roles[pid] = f"command: {name}"

    def by_role(self) -> Figures:
        roles: Figures = {}
        for pid, used in self._seen.items():
            roles[self._roles[pid]] = roles.get(self._roles[pid], 0.0) + used
        return roles


def _pids() -> set[int]:
    return {int(name) for name in os.listdir("/proc") if name.isdigit()}


async def by_process(stub: pb_grpc.RolloutServiceAsyncStub, meter: Meter, total: int) -> Run:
    """ms per rollout of each process, at c1 and c16."""
    figures: dict[str, Figures] = {}
    for concurrency in (1, 16):
        before = meter.read()
        began = time.perf_counter()
        latencies, _ = await run_batch(stub, total, concurrency)
        wall = time.perf_counter() - began
        await asyncio.sleep(_AFTER_RESULT_S)
        row = _minus(meter.read(), before, total)
        row["p50_ms"] = statistics.median(latencies)
        row["rollouts_per_s"] = total / wall
        figures[f"c{concurrency}"] = row
    return figures


async def by_phase(
    stub: pb_grpc.RolloutServiceAsyncStub, meter: Meter, total: int
) -> tuple[Figures, Figures]:
    """Whole-tree ms per rollout spent in each phase, one rollout at a time; and the
    sandboxes' processes by role, sampled meanwhile."""
    phases: Figures = {}
    with Sampler(meter.fork_server) as sampler:
        for _ in range(total):
            await _phases_of_one(stub, meter, phases)
    roles = {role: used / total for role, used in sampler.by_role().items()}
    return {phase: used / total for phase, used in phases.items()}, roles


async def _phases_of_one(
    stub: pb_grpc.RolloutServiceAsyncStub, meter: Meter, phases: Figures
) -> None:
    """Adds to `phases` the whole tree's ms from each phase event to the next."""
    started = await stub.StartRollout(pb.StartRolloutRequest(spec=noop_spec()))
    current, mark = "admission", meter.total()
    watch = stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=started.rollout.id))
    async for response in watch:
        kind = response.event.WhichOneof("payload")
        if kind not in ("phase", "finished"):
            continue
        now = meter.total()
        phases[current] = phases.get(current, 0.0) + now - mark
        current, mark = "after the result", now
        if kind == "phase":
            current = pb.Phase.Name(response.event.phase.phase).removeprefix("PHASE_").lower()
    await asyncio.sleep(_AFTER_RESULT_S)
    phases[current] = phases.get(current, 0.0) + meter.total() - mark


def run_server(total: int, root: Path | None = None) -> Run:
    """The figures of one server, on a fresh state directory: this tree's code, or that of
    the checkout at `root` (its `service` package and fork server)."""
    command = (
        None if root is None else ["env", "-C", str(root), sys.executable, "-m", "service.server"]
    )
    with tempfile.TemporaryDirectory() as state:
        server = ServerProcess(
            Path(state),
            env={"ROLLOUT_MAX_RUNNING": "64", "ROLLOUT_LOG_LEVEL": "WARNING"},
            command=command,
        )
        target = server.start()
        try:
            return asyncio.run(_measure(target, server.pid, total))
        finally:
            server.stop()


async def _measure(target: str, pid: int, total: int) -> Run:
    tree = TreeCpu()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        await run_batch(stub, 32, 16)  # warm sandboxes, disk pool, caches
        tree.follow(pid)
        try:
            meter = Meter(pid, tree)
            figures = await by_process(stub, meter, total)
            figures["phases"], figures["sampled"] = await by_phase(stub, meter, total // 2)
        finally:
            tree.close()
    return figures


def sandbox_floor(total: int) -> Figures:
    """CPU ms of one sandbox life (create, exec `true`, kill), made now and taken warm,
    in this process's cgroup (this process moved in, as the server is)."""
    tree = TreeCpu()
    tree.follow(os.getpid())
    try:
        return asyncio.run(_floor(tree, total))
    finally:
        tree.close()


async def _floor(tree: TreeCpu, total: int) -> Figures:
    with tempfile.TemporaryDirectory(prefix="bench-cpu-") as scratch:
        # the default cache, as the server's: a new one would build a base image first
        settings = Settings(state_dir=Path(scratch) / "state", local_warm_sandboxes=0)
        cold = LocalBackend(settings)
        warm = LocalBackend(settings.model_copy(update={"local_warm_sandboxes": 1}))
        figures: Figures = {}
        for name, backend in (("made now", cold), ("taken warm", warm)):
            life = sandbox_life(backend, name.replace(" ", "-"))
            for _ in range(5):
                await life()
            await _quiet(warm)
            before = tree.ms() or 0.0
            for _ in range(total):
                await life()
                await _quiet(warm)  # the refill counted: it is part of a warm life
            figures[f"sandbox life, {name}"] = ((tree.ms() or 0.0) - before) / total
        await cold.close()
        await warm.close()
    return figures


async def _quiet(warm: LocalBackend) -> None:
    await warm.warm_up()
    await asyncio.sleep(0.05)  # the directory's removal, off the path


def _spread(runs: list[Figures], key: str) -> tuple[float, float, float]:
    values = [run[key] for run in runs if key in run]
    if not values:
        return 0.0, 0.0, 0.0
    return statistics.median(values), min(values), max(values)


def _cell(runs: list[Figures], key: str) -> str:
    median, low, high = _spread(runs, key)
    return f"{median:.1f} ({low:.1f}-{high:.1f})"


def report(runs: list[Run], floors: list[Figures]) -> str:
    c1 = [run["c1"] for run in runs]
    c16 = [run["c16"] for run in runs]
    keys = [key for key in c1[0] if key not in ("p50_ms", "rollouts_per_s", "total")]
    lines = [
        f"CPU ms per no-op rollout, median of {len(runs)} runs (min-max):\n",
        "| process | c1 | c16 |",
        "|---|---|---|",
    ]
    lines += [f"| {key} | {_cell(c1, key)} | {_cell(c16, key)} |" for key in keys]
    lines.append(f"| **total (the cgroup)** | {_cell(c1, 'total')} | {_cell(c16, 'total')} |")
    sampled = [run["sampled"] for run in runs]
    roles = sorted({role for run in sampled for role in run})
    lines += [
        f"| of the sandboxes, sampled at c1: {role} | {_cell(sampled, role)} | |" for role in roles
    ]
    lines.append(f"| p50 ms | {_cell(c1, 'p50_ms')} | {_cell(c16, 'p50_ms')} |")
    lines.append(f"| rollouts/s | {_cell(c1, 'rollouts_per_s')} | {_cell(c16, 'rollouts_per_s')} |")
    phases = [run["phases"] for run in runs]
    lines += ["\nBy phase, whole tree, c1, CPU ms per rollout:\n", "| phase | ms |", "|---|---|"]
    lines += [f"| {phase} | {_cell(phases, phase)} |" for phase in phases[0]]
    base, _, _ = _spread(c1, "total")
    lines += ["\nAgainst the sandbox's own floor, same run:\n", "| | CPU ms | rollout / it |"]
    lines.append("|---|---|---|")
    for key in floors[0]:
        median, _, _ = _spread(floors, key)
        lines.append(f"| {key} | {_cell(floors, key)} | {base / median:.2f}x |")
    return "\n".join(lines)


def compare(runs: dict[str, list[Run]]) -> str:
    """Each configuration's headline figures and their ratio to the first's, same run."""
    names = list(runs)
    base = runs[names[0]]
    rows = (
        ("CPU ms per rollout, c1", "c1", "total"),
        ("CPU ms per rollout, c16", "c16", "total"),
        ("p50 ms, c1", "c1", "p50_ms"),
        ("rollouts/s, c16", "c16", "rollouts_per_s"),
    )
    lines = [f"\nAgainst {names[0]}, same run, median (min-max):\n"]
    lines += ["| figure | " + " | ".join(names) + " | ratio |", "|---|" + "---|" * (len(names) + 1)]
    for title, level, key in rows:
        cells = [_cell([run[level] for run in runs[name]], key) for name in names]
        first = _spread([run[level] for run in base], key)[0]
        last = _spread([run[level] for run in runs[names[-1]]], key)[0]
        lines.append(f"| {title} | " + " | ".join(cells) + f" | {last / first:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=100, help="per concurrency and run")
    parser.add_argument("--repeats", type=int, default=3, help="runs, each on a new server")
    parser.add_argument(
        "--vs", type=Path, help="a checkout whose server is the baseline, run interleaved"
    )
    args = parser.parse_args()
    roots: dict[str, Path | None] = {"this tree": None}
    if args.vs is not None:
        roots = {f"baseline ({args.vs})": args.vs.resolve(), **roots}
    runs: dict[str, list[Run]] = {name: [] for name in roots}
    floors = []
    for _ in range(args.repeats):  # interleaved: a shared machine's load moves
        for name, root in roots.items():
            runs[name].append(run_server(args.rollouts, root))
        floors.append(sandbox_floor(args.rollouts // 2))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "rollout_cpu.json").write_text(
        json.dumps({"runs": runs, "floors": floors}, indent=2)
    )
    for name in roots:
        print(f"\n### {name}\n")
        print(report(runs[name], floors))
    if len(roots) > 1:
        print(compare(runs))


if __name__ == "__main__":
    main()
