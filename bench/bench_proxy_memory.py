"""Server memory around rollouts whose agent posts huge bodies through the capture proxy.

A real server subprocess (`testing.server_process`) and the fake upstream (in this process).
Each rollout's command agent, in a real sandbox, posts one body of `--body-mib` MiB to each
of `/v1/responses`, `/v1/messages` and `/v1/chat/completions` through its proxy route (the
agent of `tests/e2e/test_turn_bounds.py`, at the issue's size). The rollout is run and read
back in the FULL view. The server's resident memory (VmRSS from /proc) is read when it is
fresh (after a warm-up rollout that made one small call of each kind), after each rollout,
and after a settle; the table gives each against the fresh figure, and the ratio; the peak
(VmHWM) shows how many copies of a body a call held at once. Writes
bench/results/proxy_memory.json.

    python bench/bench_proxy_memory.py [--rollouts 4] [--body-mib 60] [--settle-s 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rollout.v1 import rollout_pb2 as pb  # noqa: E402
from rollout.v1 import rollout_pb2_grpc as pb_grpc  # noqa: E402

from testing.fakes.llm_upstream import FakeUpstream  # noqa: E402
from testing.server_process import ServerProcess, resident_bytes  # noqa: E402
from testing.specs import PATHS, POST, command_spec  # noqa: E402

RESULTS = ROOT / "bench" / "results"
MIB = 1024 * 1024
KEY = "bench-proxy-memory-key"
MESSAGE_LIMIT = 64 * MIB


def peak_resident_bytes(pid: int) -> int:
    """The process's highest RSS so far (VmHWM): what a call's copies of a body cost at once."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise SystemExit(f"no VmHWM for pid {pid}")


def big_body_spec(upstream: FakeUpstream, body_bytes: int) -> pb.RolloutSpec:
    endpoint = {"baseUrl": upstream.base_url, "apiKey": KEY, "model": "m"}
    return command_spec(POST.format(size=body_bytes, paths=PATHS), endpoint=endpoint)


async def run_one(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream, body_bytes: int
) -> None:
    request = pb.RunRolloutRequest(
        spec=big_body_spec(upstream, body_bytes), view=pb.RESULT_VIEW_FULL
    )
    rollout = (await stub.RunRollout(request)).rollout
    upstream.requests.clear()  # this process's copies, not the server's
    if rollout.status != pb.ROLLOUT_STATUS_SUCCEEDED:
        raise SystemExit(f"rollout {rollout.id} ended {rollout.status}: {rollout.result.error}")
    got = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=rollout.id))
    assert got.rollout.result.turn_count == len(PATHS), got.rollout.result.turn_count


async def measure(
    server: ServerProcess, rollouts: int, body_mib: int, settle_s: float
) -> dict[str, Any]:
    options = [
        ("grpc.max_send_message_length", MESSAGE_LIMIT),
        ("grpc.max_receive_message_length", MESSAGE_LIMIT),
    ]
    rows: list[tuple[str, float]] = []
    async with (
        FakeUpstream(api_key=KEY) as upstream,
        grpc.aio.insecure_channel(server.target, options=options) as channel,
    ):
        stub = pb_grpc.RolloutServiceStub(channel)
        await run_one(stub, upstream, 1024)  # warms up the sandbox, proxy and dialect paths
        rows.append(("fresh (after a 1 KiB warm-up)", resident_bytes(server.pid) / MIB))
        fresh_peak = peak_resident_bytes(server.pid) / MIB
        started = time.perf_counter()
        for number in range(1, rollouts + 1):
            await run_one(stub, upstream, body_mib * MIB)
            rows.append((f"after rollout {number}", resident_bytes(server.pid) / MIB))
        wall_s = time.perf_counter() - started
        peak = peak_resident_bytes(server.pid) / MIB
        await asyncio.sleep(settle_s)
        rows.append((f"after a {settle_s:g} s settle", resident_bytes(server.pid) / MIB))
    fresh = rows[0][1]
    return {
        "body_mib": body_mib,
        "bodies_per_rollout": len(PATHS),
        "rollouts": rollouts,
        "wall_s": round(wall_s, 1),
        "rss_mib": [
            {"moment": m, "rss": round(r, 1), "growth": round(r - fresh, 1)} for m, r in rows
        ],
        "peak_rss_mib": round(peak, 1),
        "peak_over_fresh_mib": round(peak - max(fresh, fresh_peak), 1),
        "settled_growth_mib": round(rows[-1][1] - fresh, 1),
        "settled_ratio": round(rows[-1][1] / fresh, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--body-mib", type=int, default=60, help="each of the three bodies")
    parser.add_argument("--settle-s", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        server = ServerProcess(
            Path(state),
            env={
                "ROLLOUT_LOG_LEVEL": "WARNING",
                "ROLLOUT_MAX_MESSAGE_BYTES": str(MESSAGE_LIMIT),
            },
        )
        server.start()
        try:
            figures = asyncio.run(measure(server, args.rollouts, args.body_mib, args.settle_s))
        finally:
            server.stop()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "proxy_memory.json").write_text(json.dumps(figures, indent=2))
    print(
        f"{figures['rollouts']} rollouts of {figures['bodies_per_rollout']} x "
        f"{figures['body_mib']} MiB bodies, {figures['wall_s']} s"
    )
    print("| moment | server RSS MiB | vs fresh MiB | ratio to fresh |")
    print("|---|---|---|---|")
    fresh = figures["rss_mib"][0]["rss"]
    for row in figures["rss_mib"]:
        print(f"| {row['moment']} | {row['rss']} | {row['growth']:+} | {row['rss'] / fresh:.2f}x |")
    print(
        f"\npeak (VmHWM) during the rollouts: {figures['peak_rss_mib']} MiB, "
        f"{figures['peak_over_fresh_mib']:+} MiB over the fresh server's"
    )
    print(
        f"settled: {figures['settled_growth_mib']:+} MiB over the fresh server "
        f"({figures['settled_ratio']:.2f}x; target: within ~32 MiB)"
    )


if __name__ == "__main__":
    main()
