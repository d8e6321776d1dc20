"""A session's command through gRPC against the sandbox's own exec (the floor that
bench/bench_sandbox.py measures), and the command launcher against the forked Python it
replaces, in one run.

The floor: N `LocalSandbox.exec("true")` on a sandbox of this process's own backend. A
session: N `Exec("true")` through a real server on loopback (a stream: the result message),
one at a time (c1: p50 and p99), then 64 sessions with one caller each (c64: commands/s,
and the CPU each command costs: the server and everything it started, in a cpuacct cgroup
(`bench_rollouts.TreeCpu`), plus this client's own). Each server runs twice, interleaved
(`--repeats`): on the compiled launcher (`local/launcher.c`, the default) and with no
compiler (`CC` pointing nowhere, an empty cache), so its spawners fork their Python per
command. Both use the host-root sandbox (ROLLOUT_SANDBOX_IMAGE=host). A third process,
`gRPC alone`, answers the same calls (OpenSession, Exec, CloseSession) at once with nothing
behind them (`--serve-grpc-alone`): the part of each figure that is Python gRPC's own.
Prints a markdown table of medians (min-max) with the ratios, and writes
bench/results/session.json.

    python bench/bench_session.py [-n 300] [--concurrency 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))

from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from bench.bench_rollouts import TreeCpu
from service.config import Settings
from service.models import SandboxSpec
from service.sandboxes import LocalBackend, SandboxRequest
from testing.server_process import ServerProcess

RESULTS = Path(__file__).parent / "results"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def floor(n: int, scratch: Path) -> list[float]:
    """Milliseconds of each sandbox exec of `true`, the sandbox made before the clock."""
    backend = LocalBackend(Settings(state_dir=scratch / "floor", sandbox_image="host"))
    sandbox = await backend.create(SandboxRequest("bench-floor", SandboxSpec(), 3600))
    try:
        times = []
        for _ in range(n):
            began = time.perf_counter()
            result = await sandbox.exec("true", timeout_s=30)
            times.append((time.perf_counter() - began) * 1000)
            assert result.exit_code == 0
        return times
    finally:
        await sandbox.kill()
        await backend.close()


async def exec_true(stub: pb_grpc.RolloutServiceAsyncStub, session_id: str) -> float:
    began = time.perf_counter()
    async for item in stub.Exec(pb.ExecRequest(session_id=session_id, command="true")):
        if item.HasField("result"):
            assert item.result.exit_code == 0
    return (time.perf_counter() - began) * 1000


async def sessions(stub: pb_grpc.RolloutServiceAsyncStub, copies: int) -> list[str]:
    spec = pb.RolloutSpec(task=pb.Task(instruction="bench"))
    response = await stub.OpenSession(pb.OpenSessionRequest(spec=spec, copies=copies))
    assert all(s.status == pb.SESSION_STATUS_READY for s in response.sessions)
    return [s.id for s in response.sessions]


Figures = dict[str, float]
"""One server's figures in one run."""


LAUNCHES = {
    "launcher": {},
    "forked Python": {"CC": "/nonexistent/cc"},
}
"""How the server's spawners start commands; the first is the default, the second the
fallback on a host without a C compiler (`launcher_build`)."""
_ALONE = "gRPC alone"


def client_cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (usage.ru_utime + usage.ru_stime) * 1000


async def through_grpc(target: str, pid: int, n: int, concurrency: int) -> Figures:
    """c1 p50/p99 of Exec, then commands/s and CPU per command at c`concurrency`."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        (one,) = await sessions(stub, 1)
        for _ in range(20):  # warm the channel and the server's paths
            await exec_true(stub, one)
        c1 = [await exec_true(stub, one) for _ in range(n)]
        await stub.CloseSession(pb.CloseSessionRequest(session_id=one))
        many = await sessions(stub, concurrency)
        per_session = max(1, (n * 4) // concurrency)

        async def caller(session_id: str) -> None:
            for _ in range(per_session):
                await exec_true(stub, session_id)

        tree = TreeCpu()
        tree.follow(pid)
        try:
            server_before, client_before = tree.ms(), client_cpu_ms()
            began = time.perf_counter()
            await asyncio.gather(*(caller(session_id) for session_id in many))
            elapsed = time.perf_counter() - began
            server_after, client_after = tree.ms(), client_cpu_ms()
        finally:
            tree.close()
        for session_id in many:
            await stub.CloseSession(pb.CloseSessionRequest(session_id=session_id))
    commands = per_session * concurrency
    figures = {
        "exec_p50_ms": percentile(c1, 0.5),
        "exec_p99_ms": percentile(c1, 0.99),
        "commands_per_s": commands / elapsed,
        "client_cpu_ms_per_command": (client_after - client_before) / commands,
    }
    if server_before is not None and server_after is not None:
        figures["server_cpu_ms_per_command"] = (server_after - server_before) / commands
    return figures


async def _open(request: pb.OpenSessionRequest, context: object) -> pb.OpenSessionResponse:
    ready = [
        pb.Session(id=f"s{index}", status=pb.SESSION_STATUS_READY)
        for index in range(max(1, request.copies))
    ]
    return pb.OpenSessionResponse(sessions=ready)


async def _exec(request: pb.ExecRequest, context: object) -> AsyncIterator[pb.ExecResponse]:
    yield pb.ExecResponse(result=pb.ExecResult(exit_code=0))


async def _close(request: pb.CloseSessionRequest, context: object) -> pb.CloseSessionResponse:
    return pb.CloseSessionResponse()


async def serve_grpc_alone() -> None:
    """Answer the session calls the bench makes at once, with no sandbox and no engine, on
    a loopback port printed on stdout, until killed."""
    service = pb.DESCRIPTOR.services_by_name["RolloutService"].full_name
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "OpenSession": grpc.unary_unary_rpc_method_handler(
            _open, pb.OpenSessionRequest.FromString, pb.OpenSessionResponse.SerializeToString
        ),
        "Exec": grpc.unary_stream_rpc_method_handler(
            _exec, pb.ExecRequest.FromString, pb.ExecResponse.SerializeToString
        ),
        "CloseSession": grpc.unary_unary_rpc_method_handler(
            _close, pb.CloseSessionRequest.FromString, pb.CloseSessionResponse.SerializeToString
        ),
    }
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(service, handlers)])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


def run_grpc_alone(n: int, concurrency: int) -> Figures:
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve-grpc-alone"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        return asyncio.run(through_grpc(f"127.0.0.1:{port}", process.pid, n, concurrency))
    finally:
        process.kill()
        process.wait()


def run_server(root: Path, launch: str, n: int, concurrency: int) -> Figures:
    env = {
        "ROLLOUT_SANDBOX_IMAGE": "host",
        "ROLLOUT_MAX_RUNNING": str(concurrency),
        "ROLLOUT_CACHE_DIR": str(root / "cache"),
        **LAUNCHES[launch],
    }
    server = ServerProcess(root / "server", env=env)
    server.start()
    try:
        return asyncio.run(through_grpc(server.target, server.pid, n, concurrency))
    finally:
        server.stop()


def _cell(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def report(floor_ms: list[float], runs: dict[str, list[Figures]]) -> tuple[str, dict[str, float]]:
    """The markdown table, and the headline figures for session.json."""
    base, other = LAUNCHES
    median = {
        name: {key: statistics.median(run[key] for run in each) for key in each[0]}
        for name, each in runs.items()
    }
    rows = [
        "| figure | " + " | ".join(runs) + f" | {base} / {other} |",
        "|---|" + "---|" * (len(runs) + 1),
    ]
    for key in median[base]:
        cells = [_cell([run[key] for run in each]) for each in runs.values()]
        ratio = median[base][key] / median[other][key] if median[other][key] else 0.0
        rows.append(f"| {key} | " + " | ".join(cells) + f" | {ratio:.2f}x |")
    floor_p50, floor_p99 = percentile(floor_ms, 0.5), percentile(floor_ms, 0.99)
    rows.append(
        f"| sandbox's own exec p50 / p99 ms (the floor) | {floor_p50:.2f} / {floor_p99:.2f} |"
        + " |" * len(runs)
    )
    headline = {
        "sandbox_exec_p50_ms": floor_p50,
        "sandbox_exec_p99_ms": floor_p99,
        "session_exec_p50_ms": median[base]["exec_p50_ms"],
        "session_exec_p99_ms": median[base]["exec_p99_ms"],
        "p50_ratio": median[base]["exec_p50_ms"] / floor_p50,
        "p99_ratio": median[base]["exec_p99_ms"] / floor_p99,
        "commands_per_s": median[base]["commands_per_s"],
        "forked_python_commands_per_s": median[other]["commands_per_s"],
        "grpc_alone_calls_per_s": median[_ALONE]["commands_per_s"],
        "cpus": os.cpu_count() or 0,
    }
    for key in ("server_cpu_ms_per_command", "client_cpu_ms_per_command"):
        if key in median[base]:
            headline[key] = median[base][key]
            headline[f"forked_python_{key}"] = median[other][key]
    return "\n".join(rows), headline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--serve-grpc-alone", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_grpc_alone:
        asyncio.run(serve_grpc_alone())
        return
    runs: dict[str, list[Figures]] = {name: [] for name in (*LAUNCHES, _ALONE)}
    with tempfile.TemporaryDirectory(prefix="bench-session-") as scratch:
        root = Path(scratch)
        floor_ms = asyncio.run(floor(args.n, root))
        for repeat in range(args.repeats):
            for launch in LAUNCHES:
                where = root / f"{launch.replace(' ', '-')}-{repeat}"
                runs[launch].append(run_server(where, launch, args.n, args.concurrency))
            runs[_ALONE].append(run_grpc_alone(args.n, args.concurrency))
    table, headline = report(floor_ms, runs)
    print(f"c{args.concurrency}, {args.repeats} runs each, medians (min-max):\n")
    print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "session.json").write_text(json.dumps(headline, indent=2) + "\n")


if __name__ == "__main__":
    main()
