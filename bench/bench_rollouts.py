"""No-op rollouts through gRPC: latency, throughput and server memory.

Each rollout is one setup command, agent `true` and one verify command, run on the
local bwrap backend by a real server subprocess. Prints a markdown table and writes
bench/results/rollouts.json.

    python bench/bench_rollouts.py [--soak 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from tests.server_process import ServerProcess

RESULTS = Path(__file__).parent / "results"


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


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_batch(
    stub: pb_grpc.RolloutServiceAsyncStub, total: int, concurrency: int
) -> tuple[list[float], float]:
    """Run `total` rollouts with `concurrency` in flight; returns latencies (ms) and wall (s)."""
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

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - began


async def measure(target: str, pid: int, soak: int) -> dict[str, object]:
    figures: dict[str, object] = {}
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        await run_batch(stub, 10, 2)
        for concurrency, total in ((1, 100), (16, 320), (64, 640)):
            latencies, wall = await run_batch(stub, total, concurrency)
            figures[f"c{concurrency}"] = {
                "rollouts": total,
                "p50_ms": round(statistics.median(latencies), 1),
                "p99_ms": round(percentile(latencies, 0.99), 1),
                "rollouts_per_s": round(total / wall, 1),
                "server_rss_mb": round(rss_mb(pid), 1),
            }
        if soak:
            samples = []
            for _ in range(10):
                await run_batch(stub, soak // 10, 16)
                samples.append(round(rss_mb(pid), 1))
            figures["soak"] = {"rollouts": soak, "rss_mb_every_10pct": samples}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--soak", type=int, default=2000, help="rollouts in the RSS soak (0: skip)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        server = ServerProcess(
            Path(state), env={"ROLLOUT_MAX_RUNNING": "64", "ROLLOUT_LOG_LEVEL": "WARNING"}
        )
        target = server.start()
        try:
            figures = asyncio.run(measure(target, server.pid, args.soak))
        finally:
            server.stop()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "rollouts.json").write_text(json.dumps(figures, indent=2))
    print("| concurrency | rollouts | p50 ms | p99 ms | rollouts/s | server RSS MB |")
    print("|---|---|---|---|---|---|")
    for key in ("c1", "c16", "c64"):
        row = figures[key]
        assert isinstance(row, dict)
        print(
            f"| {key[1:]} | {row['rollouts']} | {row['p50_ms']} | {row['p99_ms']} "
            f"| {row['rollouts_per_s']} | {row['server_rss_mb']} |"
        )
    if "soak" in figures:
        print(f"\nRSS over the soak: {figures['soak']}")


if __name__ == "__main__":
    main()
