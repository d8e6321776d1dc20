"""The OpenEnv front door's cost: a no-op run_rollout through it (openenv's MCPToolClient over
HTTP /mcp) against the RunRollout it wraps (AsyncRolloutClient), interleaved in one run on the
same server. Writes bench/results/openenv.json.

    python bench/bench_openenv.py [--rollouts 20]

The issue's figure, the terminal's step against the gRPC Exec it wraps, waits for the sessions
RPCs (docs/openenv.md#the-terminal-environment); this is the same ratio for opencode_env.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from openenv.core.mcp_client import MCPToolClient
from rollout_client import AsyncRolloutClient

from service.openenv.opencode_task import RolloutArguments, spec_of
from tests.openenv.front_door import front_door
from tests.server_process import ServerProcess

RESULTS = Path(__file__).parent / "results"
NOOP = {"instruction": "nothing", "agent": "command", "agent_command": "true", "verify": ["true"]}


async def _measure(target: str, door_url: str, rollouts: int) -> dict[str, list[float]]:
    spec = spec_of(RolloutArguments(**NOOP))  # type: ignore[arg-type]
    times: dict[str, list[float]] = {"grpc": [], "openenv": []}
    async with (
        AsyncRolloutClient(target, token="") as client,
        MCPToolClient(base_url=f"{door_url}/opencode_env", message_timeout_s=120) as env,
    ):
        await client.run(spec)  # warm both paths once
        await env.call_tool("run_rollout", **NOOP)
        for _ in range(rollouts):
            start = time.perf_counter()
            await client.run(spec)
            times["grpc"].append(time.perf_counter() - start)
            start = time.perf_counter()
            result = json.loads(await env.call_tool("run_rollout", **NOOP))
            times["openenv"].append(time.perf_counter() - start)
            assert result["reward"] == 1.0, result
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rollouts", type=int, default=20)
    arguments = parser.parse_args()
    os.environ.setdefault("ROLLOUT_SANDBOX_IMAGE", "host")
    with tempfile.TemporaryDirectory() as state:
        server = ServerProcess(Path(state) / "server")
        target = server.start()
        door = front_door(Path(state) / "door", target)
        try:
            times = asyncio.run(_measure(target, door.start(), arguments.rollouts))
        finally:
            door.stop()
            server.stop()
    p50 = {name: statistics.median(values) * 1000 for name, values in times.items()}
    figures = {
        "rollouts": arguments.rollouts,
        "grpc_p50_ms": round(p50["grpc"], 1),
        "openenv_p50_ms": round(p50["openenv"], 1),
        "ratio_p50": round(p50["openenv"] / p50["grpc"], 2),
        "added_p50_ms": round(p50["openenv"] - p50["grpc"], 1),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "openenv.json").write_text(json.dumps(figures, indent=2) + "\n")
    print("| path | p50 ms |\n|---|---|")
    print(f"| RunRollout (gRPC) | {figures['grpc_p50_ms']} |")
    print(f"| run_rollout through the front door | {figures['openenv_p50_ms']} |")
    print(f"ratio {figures['ratio_p50']}x, +{figures['added_p50_ms']} ms a rollout")


if __name__ == "__main__":
    main()
