"""Server memory over a soak of no-op rollouts, against the baseline server in the same run.

`--rollouts` no-op rollouts (16 in flight) through a real server subprocess, its RSS read from
/proc every tenth of the way. Growth is measured from the first sample (after a tenth of the
soak: imports, pools and caches are warm by then) to the last; the target is under 10%. The
baseline is the same soak served by `--baseline-ref`'s code (see bench_watchers). Prints a
markdown table with the ratios and writes bench/results/soak.json.

    python bench/bench_soak.py [--rollouts 5000] [--baseline-ref REF]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rollout.v1 import rollout_pb2_grpc as pb_grpc

from bench.bench_rollouts import rss_mb, run_batch
from bench.bench_watchers import BASELINE_REF, baseline_command, ratio
from testing.server_process import ServerProcess

RESULTS = Path(__file__).parent / "results"
_SAMPLES = 10
_CONCURRENCY = 16


async def _soak(target: str, pid: int, rollouts: int) -> list[float]:
    samples = []
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        for _ in range(_SAMPLES):
            await run_batch(stub, rollouts // _SAMPLES, _CONCURRENCY)
            samples.append(round(rss_mb(pid), 1))
    return samples


def soak(server_command: list[str], rollouts: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as state:
        env = {"ROLLOUT_MAX_RUNNING": str(_CONCURRENCY), "ROLLOUT_LOG_LEVEL": "WARNING"}
        server = ServerProcess(Path(state), env=env, command=server_command)
        target = server.start()
        try:
            samples = asyncio.run(_soak(target, server.pid, rollouts))
        finally:
            server.stop()
    first, last = samples[0], samples[-1]
    measured = rollouts - rollouts // _SAMPLES
    return {
        "rollouts": rollouts,
        "rss_mb_every_tenth": samples,
        "growth_pct": round((last - first) * 100 / first, 1),
        "kb_per_rollout": round(max(last - first, 0.0) * 1024 / measured, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rollouts", type=int, default=5000)
    parser.add_argument("--baseline-ref", default=BASELINE_REF)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as old:
        figures = {
            "current": soak([sys.executable, "-m", "service.server"], args.rollouts),
            "baseline": soak(baseline_command(args.baseline_ref, Path(old)), args.rollouts),
        }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "soak.json").write_text(json.dumps(figures, indent=2))
    print(f"baseline: {args.baseline_ref}, measured in this run; target: growth under 10%\n")
    print("| server | rollouts | RSS MB at 10% -> 100% | growth % | KB kept per rollout (x base) |")
    print("|---|---|---|---|---|")
    base = figures["baseline"]
    for name, row in figures.items():
        samples = row["rss_mb_every_tenth"]
        assert isinstance(samples, list)
        kept = f"{row['kb_per_rollout']}"
        if name != "baseline":
            kept += f" ({ratio(row['kb_per_rollout'], base['kb_per_rollout'])})"
        print(
            f"| {name} | {row['rollouts']} | {samples[0]} -> {samples[-1]} "
            f"| {row['growth_pct']} | {kept} |"
        )


if __name__ == "__main__":
    main()
