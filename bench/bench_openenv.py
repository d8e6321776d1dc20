"""The OpenEnv front door's cost, each figure against the gRPC call it wraps, interleaved in
one run on the same server (host-root sandboxes):

- the terminal: a `true` step through it (openenv's GenericEnvClient over /ws) against the
  Exec of `true` it wraps (AsyncRolloutClient, on a session of its own), p50 and p99;
- opencode_env: a no-op run_rollout (openenv's MCPToolClient over HTTP /mcp) against the
  RunRollout it wraps.

Writes bench/results/openenv.json.

    python bench/bench_openenv.py [--steps 200] [--rollouts 20]
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

from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient
from rollout_client import AsyncRolloutClient

from service.openenv import RolloutArguments, spec_of
from testing.front_door import front_door
from testing.server_process import ServerProcess

RESULTS = Path(__file__).parent / "results"
TASK = {"instruction": "bench"}
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


async def _measure_steps(target: str, door_url: str, steps: int) -> dict[str, list[float]]:
    """Seconds of each `true`: a step through the door, and an Exec on a session of its own."""
    times: dict[str, list[float]] = {"grpc": [], "openenv": []}
    async with (
        AsyncRolloutClient(target, token="") as client,
        GenericEnvClient(base_url=f"{door_url}/terminal", message_timeout_s=120) as env,
    ):
        (session,) = await client.open_session({"task": TASK})
        await env.reset(task=TASK)
        for _ in range(20):  # warm both paths
            await client.exec(session.id, "true")
            await env.step({"command": "true"})
        for _ in range(steps):
            start = time.perf_counter()
            ran = await client.exec(session.id, "true")
            times["grpc"].append(time.perf_counter() - start)
            start = time.perf_counter()
            step = await env.step({"command": "true"})
            times["openenv"].append(time.perf_counter() - start)
            assert ran.exit_code == 0, ran
            assert step.observation["exit_code"] == 0, step
        await client.close_session(session.id)
    return times


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _step_figures(times: dict[str, list[float]]) -> dict[str, float]:
    figures: dict[str, float] = {"steps": len(times["grpc"])}
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        grpc_ms, door_ms = _percentile(times["grpc"], q), _percentile(times["openenv"], q)
        figures[f"exec_{name}_ms"] = round(grpc_ms, 2)
        figures[f"step_{name}_ms"] = round(door_ms, 2)
        figures[f"ratio_{name}"] = round(door_ms / grpc_ms, 2)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rollouts", type=int, default=20)
    arguments = parser.parse_args()
    os.environ.setdefault("ROLLOUT_SANDBOX_IMAGE", "host")
    with tempfile.TemporaryDirectory() as state:
        server = ServerProcess(Path(state) / "server")
        target = server.start()
        door = front_door(Path(state) / "door", target)
        try:
            url = door.start()
            steps = asyncio.run(_measure_steps(target, url, arguments.steps))
            times = asyncio.run(_measure(target, url, arguments.rollouts))
        finally:
            door.stop()
            server.stop()
    p50 = {name: statistics.median(values) * 1000 for name, values in times.items()}
    terminal = _step_figures(steps)
    figures = {
        "terminal": terminal,
        "rollouts": arguments.rollouts,
        "grpc_p50_ms": round(p50["grpc"], 1),
        "openenv_p50_ms": round(p50["openenv"], 1),
        "ratio_p50": round(p50["openenv"] / p50["grpc"], 2),
        "added_p50_ms": round(p50["openenv"] - p50["grpc"], 1),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "openenv.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(f"terminal, {arguments.steps} `true` steps each, interleaved:")
    print("| path | p50 ms | p99 ms |\n|---|---|---|")
    print(f"| Exec (gRPC) | {terminal['exec_p50_ms']} | {terminal['exec_p99_ms']} |")
    print(f"| step through /terminal | {terminal['step_p50_ms']} | {terminal['step_p99_ms']} |")
    print(f"ratio {terminal['ratio_p50']}x p50, {terminal['ratio_p99']}x p99")
    print(f"opencode_env, {arguments.rollouts} no-op rollouts each, interleaved:")
    print("| path | p50 ms |\n|---|---|")
    print(f"| RunRollout (gRPC) | {figures['grpc_p50_ms']} |")
    print(f"| run_rollout through the front door | {figures['openenv_p50_ms']} |")
    print(f"ratio {figures['ratio_p50']}x, +{figures['added_p50_ms']} ms a rollout")


if __name__ == "__main__":
    main()
