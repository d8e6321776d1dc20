"""Many concurrent rollouts on E2B across three replicas sharing one PostgreSQL, ramped up.

Real: three server subprocesses (`ROLLOUT_DATABASE_URL` on a throwaway PostgreSQL cluster,
`testing/postgres_server.py`), their e2b backends and SDK, the fake E2B cloud's wire
(one cloud process per replica, `bench/scale_cloud.py`), each replica's capture proxy (TCP,
`ROLLOUT_PROXY_PUBLIC_URL`: the sandbox calls the service's proxy, no proxy inside it), the
events, the store and the cross-replica fan-out (WatchRollout on a replica that does not run
the rollout). Cheap: the agent, a coroutine of the cloud process that makes a streamed chat call
through the proxy every `--every` s (jittered) and prints a line after each; the upstream is
the fast fake (`python -m testing.fakes.llm_upstream`).

Rollouts are started round-robin over the replicas in steps (a tenth, a quarter, half, three
quarters, all of `--rollouts`); once a step's agents all run, a window of `--window` s is
measured: per replica CPU (cores) and RSS, per live rollout; PostgreSQL's CPU, transactions/s
and rows written/s (pg_stat_database), events/s (rows inserted into `events`); the cloud's and
the upstream's CPU; model calls/s and their latency through the proxy; and the delay from an
event's `time` to its arrival at a watcher on another replica (a sample of `--watch` rollouts).
Then every rollout is cancelled (timed). With `--profile`, replica 0 runs under cProfile and
its top functions are printed. Writes bench/results/scale.json and prints markdown tables.

Clean-up: on SIGINT (Ctrl-C), SIGTERM or an error the bench kills its replicas (their rollouts
are the fake cloud's), stops the fake clouds, the upstream and PostgreSQL, and removes their
folders. Should the bench itself be killed (kill -9), a guard process in its own session
(`--guard`, started first) does the same once the bench's end closes its stdin: it stops
PostgreSQL (immediate shutdown), kills every process whose command line or environment names
the bench's folders (all it started have its folder in their environment), and removes the
folders (/tmp/rollout-pg-*, the replicas' state).

    python bench/bench_scale.py [--rollouts 600] [--every 30] [--window 30] [--profile]
    python bench/bench_scale.py --rollouts 10000 --window 20 --watch 200 --cancel 1000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import pstats
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import psycopg
from google.protobuf.duration_pb2 import Duration

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from bench.bench_rollouts import rss_mb
from bench.bench_watchers import percentile
from bench.scale_cloud import AGENT_MARK
from testing.postgres_server import PostgresServer, postgres_bin_dir
from testing.server_process import ServerProcess

RESULTS = Path(__file__).parent / "results"
REPLICAS = 3
KEY = "sk-bench-scale"
STEPS = (0.1, 0.25, 0.5, 0.75, 1.0)
LOOP_BUDGET_CORES = 0.7
"""A replica is one event loop: plan for it to be at most this busy (the rest absorbs bursts)."""
PROJECTED = 100_000
_TICK = os.sysconf("SC_CLK_TCK")
_ROOT_VARIABLE = "BENCH_SCALE_ROOT"
"""In the environment of every process the bench starts: its folder, which the guard looks for."""


def spec(upstream: str) -> pb.RolloutSpec:
    return pb.RolloutSpec(
        task=pb.Task(instruction="keep working until cancelled"),
        agent=pb.Agent(name="command", command=f": {AGENT_MARK}"),
        agent_timeout=Duration(seconds=3600),
        endpoint=pb.Endpoint(base_url=upstream, api_key=KEY, model="bench-model"),
        sandbox=pb.SandboxSpec(backend="e2b", template="base", network=pb.NETWORK_POLICY_NONE),
        labels={"bench": "scale"},
    )


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of `pid`, of its children that ended, and of its live descendants."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0.0
    own = sum(int(value) for value in fields[11:15]) / _TICK
    return own + sum(tree_cpu_s(int(child)) for child in children)


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine since boot (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return float(sum(values) - idle), float(sum(values))


def raise_file_limit() -> None:
    """Sockets: each live rollout holds a few in its replica and in the cloud."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 17, 1 << 17))
    except (ValueError, OSError):  # not root: as far as the hard limit allows
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Guard:
    """The `--guard` process: told the bench's folders, it cleans up after the bench when its
    stdin ends, however the bench ended. In its own session: Ctrl-C in a terminal does not
    reach it, so it outlives the bench's own clean-up and finds nothing left when that worked."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, __file__, "--guard"],
            stdin=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def watch(self, folder: Path) -> None:
        """Kill whatever process names `folder`, stop a PostgreSQL cluster in it, remove it."""
        assert self._process.stdin is not None
        self._process.stdin.write(f"{folder}\n")
        self._process.stdin.flush()

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait()


def guard() -> None:
    """`--guard`: read folders from stdin until it ends, then clean up after them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    folders = [line.strip() for line in sys.stdin if line.strip()]
    mine = os.getpid()
    for _ in range(2):  # again for any a dying parent had started meanwhile
        for folder in folders:
            _stop_postgres(Path(folder))
        for pid in _naming(folders):
            if pid != mine:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def _naming(folders: list[str]) -> list[int]:
    """Processes whose command line or environment contains one of `folders`."""
    marks = [folder.encode() for folder in folders]
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if any(mark in text for mark in marks):
            found.append(int(entry.name))
    return found


def _stop_postgres(folder: Path) -> None:
    """Immediate shutdown (SIGQUIT) of the cluster whose postmaster.pid is in `folder`/data."""
    try:
        postmaster = int((folder / "data" / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGQUIT)
    except (OSError, ValueError, IndexError):
        return
    for _ in range(100):
        if not Path(f"/proc/{postmaster}").exists():
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(postmaster, signal.SIGKILL)


class Cloud:
    """One `scale_cloud.py` process."""

    def __init__(self, process: asyncio.subprocess.Process, environment: dict[str, str]) -> None:
        self.process = process
        self.environment = environment

    @classmethod
    async def start(cls, root: Path, every_s: float) -> Cloud:
        script = Path(__file__).with_name("scale_cloud.py")
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(script), str(root), "--every", str(every_s),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return cls(process, await cls._line(process))

    @staticmethod
    async def _line(process: asyncio.subprocess.Process) -> dict[str, Any]:
        assert process.stdout is not None
        line = await process.stdout.readline()
        if not line:
            raise RuntimeError("the fake cloud stopped")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def stats(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(b"stats\n")
        return await self._line(self.process)

    async def stop(self, timeout_s: float) -> None:
        """Close its stdin (it closes its sandboxes and exits); kill it after `timeout_s`."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), timeout_s)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()


@dataclass
class Deliveries:
    """(arrival time, delay ms) of every event the sampled watchers received."""

    samples: list[tuple[float, float]] = field(default_factory=list)
    streams_failed: int = 0

    def between(self, start: float, end: float) -> list[float]:
        return [delay for at, delay in self.samples if start <= at < end]


async def watch(stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str, out: Deliveries) -> None:
    try:
        async for response in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id)):
            now = time.time()
            out.samples.append((now, (now - response.event.time.ToNanoseconds() / 1e9) * 1000))
    except grpc.aio.AioRpcError:
        out.streams_failed += 1


@dataclass
class Fleet:
    """The running system: replicas, clouds, database, upstream."""

    replicas: list[ServerProcess]
    clouds: list[Cloud]
    stubs: list[pb_grpc.RolloutServiceAsyncStub]
    database_url: str
    postmaster: int
    upstream: subprocess.Popen[str]
    started: list[tuple[int, str]] = field(default_factory=list)
    """(replica index, rollout id) of every rollout started."""
    refused: list[str] = field(default_factory=list)
    watchers: list[asyncio.Task[None]] = field(default_factory=list)
    deliveries: Deliveries = field(default_factory=Deliveries)

    def pids(self) -> dict[str, int]:
        named = {f"replica {i}": r.pid for i, r in enumerate(self.replicas)}
        named |= {f"cloud {i}": c.process.pid for i, c in enumerate(self.clouds)}
        return named | {"postgresql": self.postmaster, "upstream": self.upstream.pid}


def database_counters(url: str) -> dict[str, float]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted"
            " FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        events = conn.execute(
            "SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'events'"
        ).fetchone()
    assert row is not None
    assert events is not None
    return {"transactions": row[0], "rows_written": row[1], "events": events[0]}


async def start_rollouts(fleet: Fleet, target: int, upstream: str, watch_every: int) -> None:
    """Start rollouts round-robin until `target` have been started (or refused)."""
    indices = iter(range(len(fleet.started) + len(fleet.refused), target))
    request = pb.StartRolloutRequest(spec=spec(upstream))

    async def starter() -> None:
        for index in indices:
            replica = index % REPLICAS
            try:
                started = await fleet.stubs[replica].StartRollout(request)
            except grpc.aio.AioRpcError as exc:
                fleet.refused.append(f"{exc.code().name}: {exc.details()}")
                continue
            fleet.started.append((replica, started.rollout.id))
            if index % watch_every == 0:
                other = fleet.stubs[(replica + 1) % REPLICAS]
                task = asyncio.create_task(watch(other, started.rollout.id, fleet.deliveries))
                fleet.watchers.append(task)

    await asyncio.gather(*(starter() for _ in range(32)))


async def live_agents(fleet: Fleet) -> tuple[list[int], list[dict[str, Any]]]:
    stats = [await cloud.stats() for cloud in fleet.clouds]
    return [s["agents"] for s in stats], stats


async def measure_step(fleet: Fleet, live: int, window_s: float) -> dict[str, Any]:
    pids = fleet.pids()
    cpu0 = {name: tree_cpu_s(pid) for name, pid in pids.items()}
    driver0 = tree_cpu_s(os.getpid()) - sum(cpu0[n] for n in cpu0 if n.startswith("cloud"))
    busy0, total0 = machine_busy()
    db0 = await asyncio.to_thread(database_counters, fleet.database_url)
    _, stats0 = await live_agents(fleet)
    began = time.time()
    await asyncio.sleep(window_s)
    ended = time.time()
    elapsed = ended - began
    cpu1 = {name: tree_cpu_s(pid) for name, pid in pids.items()}
    driver1 = tree_cpu_s(os.getpid()) - sum(cpu1[n] for n in cpu1 if n.startswith("cloud"))
    busy1, total1 = machine_busy()
    db1 = await asyncio.to_thread(database_counters, fleet.database_url)
    agents, stats1 = await live_agents(fleet)
    cores = {name: round((cpu1[name] - cpu0[name]) / elapsed, 3) for name in pids}
    cores["driver"] = round((driver1 - driver0) / elapsed, 3)
    rss = {f"replica {i}": round(rss_mb(r.pid), 1) for i, r in enumerate(fleet.replicas)}
    calls = sum(s1["calls"] - s0["calls"] for s0, s1 in zip(stats0, stats1, strict=True))
    delays = fleet.deliveries.between(began, ended)
    replica_cores = [cores[f"replica {i}"] for i in range(REPLICAS)]
    per_replica_live = [a or 1 for a in agents]
    return {
        "live": sum(agents),
        "live_per_replica": agents,
        "target": live,
        "window_s": round(elapsed, 1),
        "cores": cores,
        "machine_busy_cores": round((busy1 - busy0) / (total1 - total0) * (os.cpu_count() or 1), 2),
        "replica_rss_mb": rss,
        "replica_ms_cpu_per_live_rollout_s": round(
            1000 * sum(c / n for c, n in zip(replica_cores, per_replica_live, strict=True)) / 3, 4
        ),
        "events_per_s": round((db1["events"] - db0["events"]) / elapsed, 1),
        "transactions_per_s": round((db1["transactions"] - db0["transactions"]) / elapsed, 1),
        "rows_written_per_s": round((db1["rows_written"] - db0["rows_written"]) / elapsed, 1),
        "model_calls_per_s": round(calls / elapsed, 1),
        "model_call_p50_ms": [s["call_p50_ms"] for s in stats1],
        "model_call_p99_ms": [s["call_p99_ms"] for s in stats1],
        "model_calls_failed": sum(s["failed"] for s in stats1),
        "last_call_error": next((s["last_error"] for s in stats1 if s["last_error"]), ""),
        "deliveries": len(delays),
        "delivery_p50_ms": round(percentile(delays, 0.5), 1) if delays else None,
        "delivery_p99_ms": round(percentile(delays, 0.99), 1) if delays else None,
    }


async def wait_live(fleet: Fleet, target: int, settle_s: float) -> tuple[int, float]:
    """Wait until `target` agents run (or `settle_s` passes); (live, seconds waited)."""
    began = time.monotonic()
    while True:
        agents, _ = await live_agents(fleet)
        live = sum(agents)
        waited = time.monotonic() - began
        if live >= target or waited > settle_s:
            return live, waited
        await asyncio.sleep(1.0)


async def ramp(fleet: Fleet, args: argparse.Namespace, upstream: str) -> list[dict[str, Any]]:
    idle_rss = [rss_mb(r.pid) for r in fleet.replicas]
    watch_every = max(1, args.rollouts // max(1, args.watch))
    steps = []
    for fraction in STEPS:
        target = int(args.rollouts * fraction)
        began = time.monotonic()
        await start_rollouts(fleet, target, upstream, watch_every)
        started_s = time.monotonic() - began
        live, waited = await wait_live(fleet, len(fleet.started), args.settle)
        print(f"step {target}: {len(fleet.started)} started, {live} live", file=sys.stderr)
        step = await measure_step(fleet, target, args.window)
        step["start_s"] = round(started_s, 1)
        step["to_live_s"] = round(started_s + waited, 1)
        step["refused"] = len(fleet.refused)
        step["replica_kb_rss_per_live_rollout"] = round(
            1024
            * sum(
                (step["replica_rss_mb"][f"replica {i}"] - idle_rss[i]) / max(1, n)
                for i, n in enumerate(step["live_per_replica"])
            )
            / REPLICAS,
            1,
        )
        steps.append(step)
        save({"rollouts": args.rollouts, "every_s": args.every, "steps": steps}, args.rollouts)
        print(json.dumps(step), file=sys.stderr)
        if live < target or fleet.refused:
            break  # it did not reach this step: the largest reached is the one before
    return steps


async def cancel_some(fleet: Fleet, count: int) -> dict[str, Any]:
    """Cancel `count` rollouts on the replicas that run them; timed, with each process's CPU."""
    chosen = fleet.started[:count]
    pending = iter(chosen)
    failed = 0
    pids = fleet.pids()
    cpu0 = {name: tree_cpu_s(pid) for name, pid in pids.items()}

    async def canceller() -> None:
        nonlocal failed
        for replica, rollout_id in pending:
            request = pb.CancelRolloutRequest(rollout_id=rollout_id, reason="bench over")
            try:
                await fleet.stubs[replica].CancelRollout(request)
            except grpc.aio.AioRpcError:
                failed += 1

    began = time.monotonic()
    await asyncio.gather(*(canceller() for _ in range(256)))
    cancel_s = time.monotonic() - began
    cpu = {name: tree_cpu_s(pid) - cpu0[name] for name, pid in pids.items()}
    agents, _ = await live_agents(fleet)
    return {
        "cancelled": len(chosen),
        "cancel_s": round(cancel_s, 1),
        "cancels_per_s": round(len(chosen) / cancel_s, 1),
        "cancel_failed": failed,
        "agents_left": sum(agents),
        "cpu_ms_per_cancel": {
            name: round(1000 * v / max(1, len(chosen)), 1) for name, v in cpu.items()
        },
    }


def final_statuses(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT status, count(*) FROM rollouts GROUP BY status").fetchall()
    return {str(status): int(count) for status, count in rows}


def start_upstream() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "testing.fakes.llm_upstream", "--text", "a short streamed reply"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def replica_env(database_url: str, cloud: Cloud, index: int, per_replica: int) -> dict[str, str]:
    port = free_port()
    return cloud.environment | {
        "ROLLOUT_DATABASE_URL": database_url,
        "ROLLOUT_PROXY_LISTEN": f"127.0.0.1:{port}",
        "ROLLOUT_PROXY_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "ROLLOUT_MAX_RUNNING": str(per_replica),
        "ROLLOUT_MAX_QUEUED": str(per_replica),
        "ROLLOUT_E2B_MAX_SANDBOXES": str(per_replica),
        "ROLLOUT_E2B_CREATES_PER_S": "0",
        "ROLLOUT_INSTANCE_ID": f"scale-{index}",
        "ROLLOUT_LOG_LEVEL": "WARNING",
        # The fake's envd speaks HTTP/1.1: one connection per live command, where E2B's edge
        # multiplexes 100 streams on each HTTP/2 connection. The SDK's pool caps connections
        # to one address (200); past it, health probes queue behind endless agent streams,
        # time out, and the rollout fails as "sandbox stopped". Room for every rollout here.
        "E2B_MAX_CONNECTIONS": str(2 * per_replica + 100),
    }


def marginal(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Cost of one more live rollout (between the first and the last step measured), and
    what `PROJECTED` live rollouts would need at that cost."""
    first, top = steps[0], steps[-1]
    added = top["live"] - first["live"] or top["live"]
    base = first if top["live"] != first["live"] else None

    def slope(value: Any) -> float:
        return float((value(top) - (value(base) if base else 0.0)) / added)

    def replicas_sum(step: dict[str, Any], key: str) -> float:
        return float(sum(step[key][f"replica {i}"] for i in range(REPLICAS)))

    replica_cores = slope(lambda s: replicas_sum(s, "cores"))
    postgres_cores = slope(lambda s: s["cores"]["postgresql"])
    cloud_cores = slope(lambda s: sum(s["cores"][f"cloud {i}"] for i in range(REPLICAS)))
    per_replica = LOOP_BUDGET_CORES / replica_cores if replica_cores > 0 else float("inf")
    events = top["events_per_s"] / top["live"]
    rows = top["rows_written_per_s"] / top["live"]
    return {
        "replica_ms_cpu_per_s_per_rollout": round(1000 * replica_cores, 4),
        "replica_kb_rss_per_rollout": round(
            1024 * slope(lambda s: replicas_sum(s, "replica_rss_mb")), 1
        ),
        "postgresql_ms_cpu_per_s_per_rollout": round(1000 * postgres_cores, 4),
        "cloud_ms_cpu_per_s_per_rollout": round(1000 * cloud_cores, 4),
        "events_per_s_per_rollout": round(events, 4),
        "rows_written_per_s_per_rollout": round(rows, 4),
        "rollouts_per_replica_at_budget": int(per_replica),
        f"replicas_for_{PROJECTED}": -(-PROJECTED // int(per_replica)),
        f"postgresql_cores_for_{PROJECTED}": round(PROJECTED * postgres_cores, 1),
        f"events_per_s_for_{PROJECTED}": round(PROJECTED * events),
        f"rows_written_per_s_for_{PROJECTED}": round(PROJECTED * rows),
    }


def profile_top(path: Path, lines: int = 30) -> str:
    out = io.StringIO()
    pstats.Stats(str(path), stream=out).sort_stats("tottime").print_stats(lines)
    return out.getvalue()


async def run(args: argparse.Namespace, root: Path, guard: Guard) -> dict[str, Any]:
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        raise SystemExit("PostgreSQL is not installed (apt-get install postgresql)")
    postgres = PostgresServer(bin_dir)
    guard.watch(postgres.folder)
    upstream: subprocess.Popen[str] | None = None
    clouds: list[Cloud] = []
    replicas: list[ServerProcess] = []
    profile = root / "replica-0.prof"
    completed = False
    try:
        await asyncio.to_thread(postgres.start)
        upstream, upstream_url = start_upstream()
        database_url = postgres.create_database()
        with psycopg.connect(database_url, autocommit=True) as conn:
            data_dir = str(conn.execute("SHOW data_directory").fetchone()[0])  # type: ignore[index]
        postmaster = int(Path(data_dir, "postmaster.pid").read_text().split()[0])
        per_replica = -(-args.rollouts // REPLICAS) + 16
        for index in range(REPLICAS):
            cloud = await Cloud.start(root / f"cloud-{index}", args.every)
            clouds.append(cloud)
            env = replica_env(database_url, cloud, index, per_replica)
            command = None
            if args.profile and index == 0:
                command = [sys.executable, "-m", "cProfile", "-o", str(profile)]
                command += ["-m", "service.server"]
            replicas.append(ServerProcess(root / f"replica-{index}", env, command))
        for replica in replicas:
            await asyncio.to_thread(replica.start)
        channels = [grpc.aio.insecure_channel(r.target) for r in replicas]
        fleet = Fleet(
            replicas=replicas,
            clouds=clouds,
            stubs=[pb_grpc.RolloutServiceStub(c) for c in channels],
            database_url=database_url,
            postmaster=postmaster,
            upstream=upstream,
        )
        steps = await ramp(fleet, args, upstream_url)
        cancel = len(fleet.started) if args.cancel < 0 else args.cancel
        teardown = await cancel_some(fleet, cancel)
        # Streams of cancelled rollouts end with their final event; the others are dropped.
        await asyncio.wait(fleet.watchers, timeout=30)
        for task in fleet.watchers:
            task.cancel()
        figures = {
            "rollouts": args.rollouts,
            "every_s": args.every,
            "watched": len(fleet.watchers),
            "watch_streams_failed": fleet.deliveries.streams_failed,
            "steps": steps,
            "marginal": marginal(steps),
            "teardown": teardown,
            "statuses": final_statuses(database_url),
            "refused_first": fleet.refused[:3],
        }
        for channel in channels:
            await channel.close()
        completed = True
    finally:
        # Graceful only after a whole run, for what asks for it: all cancelled (the replicas
        # drain nothing), or replica 0 profiled (cProfile writes its file at exit).
        drain = [completed and (args.cancel < 0 or (args.profile and i == 0)) for i in range(3)]
        stopping = list(zip(replicas, drain, strict=False))
        await asyncio.shield(stop_all(stopping, clouds, upstream, postgres))
    if args.profile:
        figures["profile_replica_0"] = (
            profile_top(profile) if profile.exists() else "not written (replica 0 did not exit)"
        )
    return figures


async def stop_all(
    replicas: list[tuple[ServerProcess, bool]],
    clouds: list[Cloud],
    upstream: subprocess.Popen[str] | None,
    postgres: PostgresServer,
) -> None:
    """Stop everything, each part whatever happened to the others: the replicas, with SIGTERM
    (drained) where their flag says so, else SIGKILL; the clouds; the upstream; PostgreSQL."""

    async def stop_replica(replica: ServerProcess, drained: bool) -> None:
        if drained:
            await asyncio.to_thread(replica.stop, signal.SIGTERM, 600.0)
        else:
            await asyncio.to_thread(replica.stop, signal.SIGKILL)

    parts = [stop_replica(replica, drained) for replica, drained in replicas]
    for outcome in await asyncio.gather(*parts, return_exceptions=True):
        if isinstance(outcome, BaseException):
            print(f"stopping a replica: {outcome!r}", file=sys.stderr)
    timeout_s = 120.0 if all(drained for _, drained in replicas) else 10.0
    for outcome in await asyncio.gather(
        *(cloud.stop(timeout_s) for cloud in clouds), return_exceptions=True
    ):
        if isinstance(outcome, BaseException):
            print(f"stopping a fake cloud: {outcome!r}", file=sys.stderr)
    if upstream is not None:
        upstream.terminate()
        await asyncio.to_thread(upstream.wait)
    try:
        await asyncio.to_thread(postgres.stop)
    except RuntimeError as exc:  # the guard stops it
        print(f"stopping PostgreSQL: {exc}", file=sys.stderr)


def save(figures: dict[str, Any], rollouts: int) -> None:
    """Write the figures so far (after each step too: a run cut short keeps its steps)."""
    RESULTS.mkdir(exist_ok=True)
    name = "scale.json" if rollouts < 10_000 else f"scale-{rollouts}.json"
    (RESULTS / name).write_text(json.dumps(figures, indent=2) + "\n")


def print_tables(figures: dict[str, Any]) -> None:
    print(f"rollouts: {figures['rollouts']}, a model call every ~{figures['every_s']} s each\n")
    print(
        "| live | replica cores (each) | replica ms CPU/s per live rollout | replica KB RSS "
        "per live rollout | PostgreSQL cores | cloud cores | machine busy cores | events/s "
        "| transactions/s | rows written/s | model calls/s | call p99 ms | delivery p50 / p99 ms |"
    )
    print("|" + "---|" * 13)
    for s in figures["steps"]:
        cores = s["cores"]
        replica = " / ".join(f"{cores[f'replica {i}']:.2f}" for i in range(REPLICAS))
        cloud = sum(cores[f"cloud {i}"] for i in range(REPLICAS))
        call_p99 = max((v for v in s["model_call_p99_ms"] if v is not None), default=None)
        print(
            f"| {s['live']:,} | {replica} | {s['replica_ms_cpu_per_live_rollout_s']} "
            f"| {s['replica_kb_rss_per_live_rollout']} | {cores['postgresql']:.2f} "
            f"| {cloud:.2f} | {s['machine_busy_cores']} | {s['events_per_s']} "
            f"| {s['transactions_per_s']} | {s['rows_written_per_s']} | {s['model_calls_per_s']} "
            f"| {call_p99} | {s['delivery_p50_ms']} / {s['delivery_p99_ms']} |"
        )
    print(
        "\nper added live rollout, and the projection (replica loop budget "
        f"{LOOP_BUDGET_CORES} core):\n"
    )
    for name, value in figures["marginal"].items():
        print(f"- {name}: {value}")
    t = figures["teardown"]
    print(
        f"\ncancelled {t['cancelled']}: {t['cancel_s']} s ({t['cancels_per_s']}/s), "
        f"CPU ms per cancel {t['cpu_ms_per_cancel']}, failed {t['cancel_failed']}, "
        f"agents left {t['agents_left']}; statuses {figures['statuses']}; "
        f"watched {figures['watched']} (streams failed {figures['watch_streams_failed']})"
    )
    if "profile_replica_0" in figures:
        print("\nreplica 0 profile (tottime):\n" + figures["profile_replica_0"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=600, help="concurrent rollouts at the top")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between model calls")
    parser.add_argument("--window", type=float, default=30.0, help="seconds measured per step")
    parser.add_argument("--watch", type=int, default=100, help="rollouts watched cross-replica")
    parser.add_argument("--settle", type=float, default=600.0, help="longest wait for a step")
    parser.add_argument("--profile", action="store_true", help="cProfile replica 0")
    parser.add_argument(
        "--cancel",
        type=int,
        default=-1,
        help="rollouts cancelled at the end (-1: all); "
        "the rest end with their replicas (kill -9) and the fake cloud",
    )
    parser.add_argument("--guard", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.guard:
        guard()
        return
    raise_file_limit()
    watchdog = Guard()
    try:
        with tempfile.TemporaryDirectory() as directory:
            watchdog.watch(Path(directory))
            os.environ[_ROOT_VARIABLE] = directory  # the guard finds every child by it
            figures = asyncio.run(stopped_by_signals(run(args, Path(directory), watchdog)))
    except asyncio.CancelledError:
        print("interrupted: replicas, fake clouds and PostgreSQL stopped", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        watchdog.close()
    save(figures, args.rollouts)
    print_tables(figures)


async def stopped_by_signals(work: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """Run `work`; the first SIGINT or SIGTERM cancels it (its clean-up runs), later ones are
    ignored so that the clean-up finishes."""
    task = asyncio.create_task(work)
    loop = asyncio.get_running_loop()

    def cancel(signum: signal.Signals) -> None:
        print(f"{signum.name}: stopping everything", file=sys.stderr)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: None)
        task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, cancel, sig)
    return await task


if __name__ == "__main__":
    main()
