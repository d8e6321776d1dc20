"""No-op rollouts through gRPC: latency, throughput, per-phase time and server memory.

Each rollout is one setup command, agent `true` and one verify command, run on the
local bwrap backend by a real server subprocess. With `--compare`, the same figures for
each server configuration in turn in the same run (the disk pool off, on, and no quota at
all), and their ratios to the first (`--rounds` repeats them, interleaved, since a shared
machine's load moves within minutes). `--disk` measures only a sandbox disk's own cost, on
the rollout's path and after it, pool off and on. Prints markdown tables and writes
bench/results/rollouts.json (rollout_disks.json).

    python bench/bench_rollouts.py [--soak 2000] [--compare [--rounds 2]] [--disk]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc
from rollout_client.batch.results import PHASES

from service.sandboxes import DiskPool, SandboxLayout, remove_tree
from testing.server_process import ServerProcess

RESULTS = Path(__file__).parent / "results"
CONFIGS = {
    "pool off": {"ROLLOUT_LOCAL_DISK_POOL": "0"},
    "pool on": {},
    "no quota": {"ROLLOUT_SANDBOX_DISK_MB": "0"},
}
"""Server settings compared by `--compare`; the first is the baseline."""


def noop_spec() -> pb.RolloutSpec:
    return pb.RolloutSpec(
        task=pb.Task(instruction="noop", setup=["true"], verify=["true"]),
        agent=pb.Agent(name="command", command="true"),
    )


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_ms(pid: int) -> float:
    """CPU time of the server process itself (Python, gRPC, engine, its threads), in ms."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime = (int(field) for field in fields[11:13])
    return (utime + stime) * 1000 / os.sysconf("SC_CLK_TCK")


class TreeCpu:
    """CPU of the server and of every process it started (fork server, spawners, bwrap,
    sandboxed commands), kernel work on their behalf included: a cpuacct cgroup (v1) the
    bench moves them into, where this host has one and the bench runs as root; else None.
    What the machine spends per rollout, so what bounds rollouts/s on its cores."""

    def __init__(self) -> None:
        self._group = _CPUACCT / f"bench-rollouts-{os.getpid()}"
        self.enabled = False

    def follow(self, pid: int) -> None:
        """Move `pid` and its descendants in; those they start later are born in it."""
        try:
            self._group.mkdir(exist_ok=True)
            for member in _descendants(pid):
                with contextlib.suppress(ProcessLookupError):
                    (self._group / "cgroup.procs").write_text(str(member))
        except OSError:
            return
        self.enabled = True

    def ms(self) -> float | None:
        if not self.enabled:
            return None
        return int((self._group / "cpuacct.usage").read_text()) / 1e6

    def close(self) -> None:
        """Remove the group (every process in it has exited by now, or is moved out)."""
        if not self._group.is_dir():
            return
        with contextlib.suppress(OSError):
            for member in (self._group / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (_CPUACCT / "cgroup.procs").write_text(member)
            self._group.rmdir()


_CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_batch(
    stub: pb_grpc.RolloutServiceAsyncStub,
    total: int,
    concurrency: int,
    phases: dict[str, list[float]] | None = None,
) -> tuple[list[float], float]:
    """Run `total` rollouts with `concurrency` in flight; returns latencies (ms) and wall (s),
    and adds each rollout's phase times (ms) to `phases` if given."""
    latencies: list[float] = []
    queue = iter(range(total))

    async def worker() -> None:
        for _ in queue:
            began = time.perf_counter()
            response = await stub.RunRollout(
                pb.RunRolloutRequest(spec=noop_spec(), view=pb.RESULT_VIEW_SLIM)
            )
            latencies.append((time.perf_counter() - began) * 1000)
            if response.rollout.status != pb.ROLLOUT_STATUS_SUCCEEDED:
                raise RuntimeError(f"rollout failed: {response.rollout.result.error}")
            if phases is not None:
                timings = response.rollout.result.timings
                for phase in PHASES:
                    phases.setdefault(phase, []).append(
                        getattr(timings, phase).ToTimedelta().total_seconds() * 1000
                    )

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - began


async def measure(target: str, pid: int, soak: int) -> dict[str, object]:
    figures: dict[str, object] = {}
    tree = TreeCpu()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        await run_batch(stub, 32, 16)  # warm sandboxes, disk pool, caches
        tree.follow(pid)
        for concurrency, total in ((1, 100), (16, 320), (64, 640)):
            phases: dict[str, list[float]] = {}
            server_before = cpu_ms(pid)
            tree_before = tree.ms()
            latencies, wall = await run_batch(stub, total, concurrency, phases)
            server_after = cpu_ms(pid)
            tree_after = tree.ms()
            figures[f"c{concurrency}"] = {
                "rollouts": total,
                "p50_ms": round(statistics.median(latencies), 1),
                "p99_ms": round(percentile(latencies, 0.99), 1),
                "rollouts_per_s": round(total / wall, 1),
                "server_rss_mb": round(rss_mb(pid), 1),
                "server_cpu_ms_per_rollout": round((server_after - server_before) / total, 1),
                "tree_cpu_ms_per_rollout": (
                    None
                    if tree_before is None or tree_after is None
                    else round((tree_after - tree_before) / total, 1)
                ),
                "load_average": round(os.getloadavg()[0], 1),
                "phase_p50_ms": {
                    phase: round(statistics.median(values), 1) for phase, values in phases.items()
                },
            }
        if soak:
            samples = []
            for _ in range(10):
                await run_batch(stub, soak // 10, 16)
                samples.append(round(rss_mb(pid), 1))
            figures["soak"] = {"rollouts": soak, "rss_mb_every_10pct": samples}
    tree.close()
    return figures


async def disk_costs(disk_mb: int = 4096, count: int = 40) -> dict[str, dict[str, float]]:
    """Per sandbox disk, in this process (as root): wall and CPU (this thread's, and its
    `mount` subprocesses') to give a sandbox its disk, on the rollout's path, and to be rid
    of it after the rollout, off it; without the pool (a new disk, removed after) and with
    it (a ready disk taken, then wiped and kept). Kernel threads' work (loop devices,
    lazy unmounts, ext4's inode table zeroing) is not counted: a floor for the new disks."""
    disk_bytes = disk_mb * 1024 * 1024
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as state:
        for name, size in (("pool off", 0), ("pool on", 1)):
            pool = DiskPool(Path(state), size, disk_bytes)
            pool.fill(disk_bytes)
            await pool.filled()
            after = remove_tree if size == 0 else pool.recycle
            walls: dict[str, list[float]] = {"path": [], "after": []}
            cpus: dict[str, list[float]] = {"path": [], "after": []}
            for number in range(count + 1):
                layout = SandboxLayout(Path(state) / f"{name.replace(' ', '-')}-{number}", None)
                for step, action in (
                    ("path", functools.partial(pool.provide, layout, disk_bytes)),
                    ("after", functools.partial(after, layout.root)),
                ):
                    wall, cpu = _timed(action)
                    if number:  # the first made the empty filesystem it copies
                        walls[step].append(wall)
                        cpus[step].append(cpu)
                    if step == "path":
                        (layout.disk / "f").write_bytes(b"x" * 4096)
            await pool.close()
            results[name] = {
                f"{step}_{what}_ms": round(statistics.median(values[step]), 2)
                for step in ("path", "after")
                for what, values in (("wall", walls), ("cpu", cpus))
            }
    return results


def _timed(action: Callable[[], object]) -> tuple[float, float]:
    """Wall ms and CPU ms (this thread, and the children it waited for) of `action()`."""
    wall, cpu = time.perf_counter(), time.thread_time()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    action()
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = done.ru_utime + done.ru_stime - children.ru_utime - children.ru_stime
    return (time.perf_counter() - wall) * 1000, (time.thread_time() - cpu + child_cpu) * 1000


def print_disk_costs(costs: dict[str, dict[str, float]]) -> None:
    print("\nPer sandbox disk (4 GiB), median of 40, ms:\n")
    print("| | on the path: wall | on the path: CPU | after the result: wall | after: CPU |")
    print("|---|---|---|---|---|")
    for name, row in costs.items():
        print(
            f"| {name} | {row['path_wall_ms']} | {row['path_cpu_ms']} "
            f"| {row['after_wall_ms']} | {row['after_cpu_ms']} |"
        )


def run_server(env: dict[str, str], soak: int) -> dict[str, object]:
    """The figures of one server configuration, on a fresh state directory."""
    with tempfile.TemporaryDirectory() as state:
        server = ServerProcess(
            Path(state),
            env={"ROLLOUT_MAX_RUNNING": "64", "ROLLOUT_LOG_LEVEL": "WARNING", **env},
        )
        target = server.start()
        try:
            return asyncio.run(measure(target, server.pid, soak))
        finally:
            server.stop()


def print_table(figures: dict[str, object]) -> None:
    print(
        "| concurrency | rollouts | p50 ms | p99 ms | rollouts/s | server RSS MB "
        "| server CPU ms/rollout | whole tree CPU ms/rollout | load average |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for key in ("c1", "c16", "c64"):
        row = figures[key]
        assert isinstance(row, dict)
        tree = row["tree_cpu_ms_per_rollout"]
        print(
            f"| {key[1:]} | {row['rollouts']} | {row['p50_ms']} | {row['p99_ms']} "
            f"| {row['rollouts_per_s']} | {row['server_rss_mb']} "
            f"| {row['server_cpu_ms_per_rollout']} | {'' if tree is None else tree} "
            f"| {row['load_average']} |"
        )
    print("\nPer phase, p50 ms:\n")
    print("| phase | c1 | c16 | c64 |")
    print("|---|---|---|---|")
    for phase in PHASES:
        cells = []
        for key in ("c1", "c16", "c64"):
            row = figures[key]
            assert isinstance(row, dict)
            cells.append(str(row["phase_p50_ms"].get(phase, "")))
        print(f"| {phase} | " + " | ".join(cells) + " |")
    if "soak" in figures:
        print(f"\nRSS over the soak: {figures['soak']}")


def print_comparison(runs: dict[str, dict[str, object]]) -> None:
    """Per-phase p50 at c1 and c16 for each configuration, and end-to-end ratios to the first."""
    names = list(runs)
    for key in ("c1", "c16"):
        print(f"\nPer phase, p50 ms at {key}:\n")
        print("| phase | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for phase in PHASES:
            cells = []
            for name in names:
                row = runs[name][key]
                assert isinstance(row, dict)
                cells.append(str(row["phase_p50_ms"].get(phase, "")))
            print(f"| {phase} | " + " | ".join(cells) + " |")
    base = runs[names[0]]
    print(f"\nAgainst {names[0]}, same run:\n")
    print("| configuration | c1 p50 ms | ratio | c16 rollouts/s | ratio | c64 rollouts/s | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        cells = [name]
        for key, figure in (("c1", "p50_ms"), ("c16", "rollouts_per_s"), ("c64", "rollouts_per_s")):
            row, base_row = runs[name][key], base[key]
            assert isinstance(row, dict)
            assert isinstance(base_row, dict)
            cells += [str(row[figure]), f"{row[figure] / base_row[figure]:.2f}x"]
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--soak", type=int, default=2000, help="rollouts in the RSS soak (0: skip)")
    parser.add_argument(
        "--compare", action="store_true", help="each configuration of CONFIGS in turn"
    )
    parser.add_argument(
        "--disk", action="store_true", help="only the disk's own costs, pool off and on"
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="with --compare: the configurations, this many times"
    )
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    if args.disk:
        costs = asyncio.run(disk_costs())
        (RESULTS / "rollout_disks.json").write_text(json.dumps(costs, indent=2))
        print_disk_costs(costs)
        return
    if args.compare:
        rounds = []
        for number in range(1, args.rounds + 1):
            runs = {}
            for name, env in CONFIGS.items():
                runs[name] = run_server(env, args.soak)
                print(f"\nround {number}, {name}:\n")
                print_table(runs[name])
            print_comparison(runs)
            rounds.append(runs)
        (RESULTS / "rollouts.json").write_text(json.dumps(rounds, indent=2))
        return
    figures = run_server({}, args.soak)
    (RESULTS / "rollouts.json").write_text(json.dumps(figures, indent=2))
    print_table(figures)


if __name__ == "__main__":
    main()
