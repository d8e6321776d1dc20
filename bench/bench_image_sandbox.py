"""Sandboxes on an image against sandboxes on the host's root, in the same run.

Interleaved so a busy machine slows both alike: a sandbox's create (made on the spot, no
warm pool) on the Debian base and on `host`, then no-op rollouts (setup `true`, agent
`true`, verify `true`) through a real server on each. The base comes from the server's
shared cache (built first if missing, outside the clock). Prints a markdown table and
writes bench/results/image_sandbox.json. Target: create on an image <= 1.5x the host root.

    python bench/bench_image_sandbox.py [-n 40] [--rollouts 20]
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

from service.config import Settings
from service.images import ImageStore
from service.models import SandboxSpec
from service.sandboxes import LocalBackend, SandboxRequest
from testing.server_process import ServerProcess

RESULTS = Path(__file__).parent / "results"
IMAGES = ("rollout/base", "host")


async def creates(rounds: int, state: Path) -> dict[str, list[float]]:
    """Milliseconds of each create (the sandbox killed off the clock)."""
    settings = Settings(state_dir=state, local_warm_sandboxes=0)
    backend = LocalBackend(settings)
    times: dict[str, list[float]] = {image: [] for image in IMAGES}
    try:
        for round_ in range(rounds + 2):  # two warm-up rounds, not counted
            for image in IMAGES:
                request = SandboxRequest(f"b{round_}-{len(image)}", SandboxSpec(image=image), 60)
                began = time.perf_counter()
                sandbox = await backend.create(request)
                elapsed = (time.perf_counter() - began) * 1000
                await sandbox.kill()
                if round_ >= 2:
                    times[image].append(elapsed)
    finally:
        await backend.close()
    return times


async def rollouts(count: int, state: Path) -> dict[str, list[float]]:
    """Milliseconds of each no-op rollout, through one real server (warm pool on)."""
    server = ServerProcess(state, env={"ROLLOUT_SANDBOX_IMAGE": "host"})
    server.start()
    times: dict[str, list[float]] = {image: [] for image in IMAGES}
    try:
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = pb_grpc.RolloutServiceStub(channel)
            for round_ in range(count + 2):
                for image in IMAGES:
                    spec = pb.RolloutSpec(
                        task=pb.Task(instruction="noop", setup=["true"], verify=["true"]),
                        agent=pb.Agent(name="command", command="true"),
                        sandbox=pb.SandboxSpec(image=image),
                    )
                    began = time.perf_counter()
                    done = await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
                    elapsed = (time.perf_counter() - began) * 1000
                    assert done.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, done.rollout
                    if round_ >= 2:
                        times[image].append(elapsed)
    finally:
        server.stop()
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=40, help="creates of each kind")
    parser.add_argument("--rollouts", type=int, default=20, help="no-op rollouts of each kind")
    args = parser.parse_args()
    asyncio.run(ImageStore(Settings().cache_dir).base())  # off the clock
    with tempfile.TemporaryDirectory() as scratch:
        created = asyncio.run(creates(args.n, Path(scratch) / "creates"))
        rolled = asyncio.run(rollouts(args.rollouts, Path(scratch) / "rollouts"))
    rows = {}
    print("| case | image | median ms | p90 ms |\n|---|---|---|---|")
    for case, figures in (("create (no warm pool)", created), ("no-op rollout", rolled)):
        for image, values in figures.items():
            ordered = sorted(values)
            median, p90 = statistics.median(values), ordered[int(0.9 * (len(ordered) - 1))]
            rows[f"{case} {image}"] = {"median_ms": median, "p90_ms": p90, "n": len(values)}
            print(f"| {case} | {image} | {median:.1f} | {p90:.1f} |")
    ratio = statistics.median(created["rollout/base"]) / statistics.median(created["host"])
    print(f"\ncreate on the image / on the host root: {ratio:.2f}x (target <= 1.5x)")
    rows["create ratio"] = {"ratio": ratio}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "image_sandbox.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
