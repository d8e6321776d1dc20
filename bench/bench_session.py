"""A session's command through gRPC against the sandbox's own exec (the floor that
bench/bench_sandbox.py measures), in one run.

The floor: N `LocalSandbox.exec("true")` on a sandbox of this process's own backend. A
session: N `Exec("true")` through a real server on loopback (a stream: the result message),
one at a time (c1: p50 and p99), then 64 sessions with one caller each (c64: commands/s).
Both use the host-root sandbox (ROLLOUT_SANDBOX_IMAGE=host). Prints a markdown table and
writes bench/results/session.json.

    python bench/bench_session.py [-n 300] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))

from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

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


async def through_grpc(target: str, n: int, concurrency: int) -> tuple[list[float], float]:
    """(milliseconds of each c1 Exec, commands per second at c`concurrency`)."""
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

        began = time.perf_counter()
        await asyncio.gather(*(caller(session_id) for session_id in many))
        rate = per_session * concurrency / (time.perf_counter() - began)
        for session_id in many:
            await stub.CloseSession(pb.CloseSessionRequest(session_id=session_id))
        return c1, rate


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-session-") as scratch:
        root = Path(scratch)
        base = await floor(args.n, root)
        env = {"ROLLOUT_SANDBOX_IMAGE": "host", "ROLLOUT_MAX_RUNNING": str(args.concurrency)}
        server = ServerProcess(root / "server", env=env)
        server.start()
        try:
            c1, rate = await through_grpc(server.target, args.n, args.concurrency)
        finally:
            server.stop()
    figures = {
        "sandbox_exec_p50_ms": percentile(base, 0.5),
        "sandbox_exec_p99_ms": percentile(base, 0.99),
        "session_exec_p50_ms": percentile(c1, 0.5),
        "session_exec_p99_ms": percentile(c1, 0.99),
        "p50_ratio": percentile(c1, 0.5) / percentile(base, 0.5),
        "p99_ratio": percentile(c1, 0.99) / percentile(base, 0.99),
        f"commands_per_s_c{args.concurrency}": rate,
        "cpus": os.cpu_count() or 0,
    }
    print("| figure | value |\n|---|---|")
    for name, value in figures.items():
        print(f"| {name} | {value:.2f} |")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "session.json").write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
