"""AGENT start to the first model call, per harness, warm against cold in the same run; and a
group of 8 opencode members' spread of first calls.

Two servers run side by side: `cold` (`ROLLOUT_LOCAL_WARM_AGENTS=false`: every agent started
as its rollout's AGENT phase begins) and `current` (the defaults: agents started ahead in warm
local sandboxes, as many per kind as its demand). Each harness's first two rollouts on each
server are not timed (installs, the first sandbox of its kind; the first teaches the warm
server the launch); how many rollouts were handed to an agent started ahead is read from the
current server's log. Rollouts alternate between them, one at a time, so both see the same
load. Each rollout's start is its AGENT PhaseChanged event, its first model call the earliest
turn's `start_time` (when the request reached the capture proxy). The scripted upstream
answers at once, so the figure is the harness's own start-up: process start, config, and
whatever it does before it asks the model.

Then on each server a group of 8 opencode members (`RunGroup`, no setup, so members take warm
sandboxes) runs once untimed (its demand: 8 alive at once), `--group-wait` seconds pass (the
warm server makes its 8), and a second is measured: the spread of its members' first model
calls (the latest minus the earliest) and their AGENT start to first call p50.

Writes bench/results/agent_start.json.

    python bench/bench_agent_start.py [--runs 5] [--agents opencode,codex] [--group-n 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from testing.server_process import ServerProcess

RESULTS = Path(__file__).parent / "results"
KEY = "sk-bench"
MODEL = "policy"
AGENTS = ("command", "opencode", "claude-code", "codex", "mini-swe-agent")
COLD_ENV = {"ROLLOUT_LOCAL_WARM_AGENTS": "false"}
MODES = ("cold", "current")
HANDED_OVER = "was started ahead: handed its instruction"
ONE_CALL = """python3 - <<'PY'
import json, os, urllib.request
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": os.environ["OPENAI_MODEL"],
                     "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
urllib.request.urlopen(request, timeout=30).read()
PY"""
"""The `command` harness's agent: one chat completion from a Python script."""


def spec(upstream: FakeUpstream, agent: str) -> pb.RolloutSpec:
    return pb.RolloutSpec(
        task=pb.Task(instruction="Say hi.", verify=["true"]),
        agent=pb.Agent(name=agent, command=ONE_CALL if agent == "command" else ""),
        endpoint=pb.Endpoint(base_url=upstream.base_url, api_key=KEY, model=MODEL),
    )


def script(upstream: FakeUpstream, agent: str) -> None:
    """What makes `agent` stop after its first answer (the others stop on plain text)."""
    if agent == "mini-swe-agent":
        submit = json.dumps({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})
        upstream.script(Reply(tool_calls=[ToolCallReply("bash", submit)]), match=has_tools)


async def first_call_s(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream, agent: str
) -> float:
    """Seconds from the rollout's AGENT phase to its first model call."""
    script(upstream, agent)
    response = await stub.RunRollout(pb.RunRolloutRequest(spec=spec(upstream, agent)))
    started, first_call = await first_call_ns(stub, response.rollout)
    return (first_call - started) / 1e9


async def first_call_ns(
    stub: pb_grpc.RolloutServiceAsyncStub, rollout: pb.Rollout
) -> tuple[int, int]:
    """When a finished rollout entered its AGENT phase, and when it made its first call."""
    if rollout.status != pb.ROLLOUT_STATUS_SUCCEEDED or not rollout.result.turns:
        tail = rollout.result.agent_log_tail[-2000:]
        raise RuntimeError(
            f"{rollout.spec.agent.name} rollout failed: {rollout.result.error}\n{tail}"
        )
    first_call = min(turn.start_time.ToNanoseconds() for turn in rollout.result.turns)
    return await agent_started_ns(stub, rollout.id), first_call


async def group_first_calls(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream, n: int
) -> dict[str, float]:
    """A group of n opencode members: the spread of their first calls and their p50."""
    group_spec = pb.GroupSpec(spec=spec(upstream, "opencode"), n=n)
    group = (await stub.RunGroup(pb.RunGroupRequest(spec=group_spec))).group
    if group.status != pb.GROUP_STATUS_COMPLETED:
        raise RuntimeError(f"group failed: {group}")
    times = []
    for member in group.members:
        got = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=member.rollout_id))
        times.append(await first_call_ns(stub, got.rollout))
    calls = [call for _, call in times]
    return {
        "spread_s": round((max(calls) - min(calls)) / 1e9, 3),
        "p50": round(statistics.median((call - start) / 1e9 for start, call in times), 3),
    }


async def agent_started_ns(stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str) -> int:
    """When the rollout entered its AGENT phase (its event, replayed)."""
    async for response in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id)):
        event = response.event
        if event.HasField("phase") and event.phase.phase == pb.PHASE_AGENT:
            return int(event.time.ToNanoseconds())
    raise RuntimeError(f"rollout {rollout_id} has no AGENT phase")


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def measure(
    targets: dict[str, str], agents: list[str], runs: int, group_n: int, group_wait_s: float
) -> dict[str, dict[str, dict[str, float]]]:
    samples: dict[str, dict[str, list[float]]] = {a: {m: [] for m in targets} for a in agents}
    groups: dict[str, dict[str, float]] = {}
    async with FakeUpstream(api_key=KEY, model=MODEL) as upstream:
        channels = {mode: grpc.aio.insecure_channel(target) for mode, target in targets.items()}
        stubs = {mode: pb_grpc.RolloutServiceStub(channel) for mode, channel in channels.items()}
        try:
            for agent in agents:
                for stub in stubs.values():  # installs, the first sandbox, the launch learnt
                    for _ in range(2):
                        await first_call_s(stub, upstream, agent)
                for _ in range(runs):
                    for mode, stub in stubs.items():
                        samples[agent][mode].append(await first_call_s(stub, upstream, agent))
                print(f"  {agent}: {samples[agent]}", file=sys.stderr, flush=True)
            if group_n:
                for stub in stubs.values():  # untimed: the demand for n at once
                    await group_first_calls(stub, upstream, group_n)
                await asyncio.sleep(group_wait_s)
                for mode, stub in stubs.items():
                    groups[mode] = await group_first_calls(stub, upstream, group_n)
                print(f"  group of {group_n}: {groups}", file=sys.stderr, flush=True)
        finally:
            for channel in channels.values():
                await channel.close()
    figures: dict[str, dict[str, dict[str, float]]] = {
        agent: {mode: summary(values) for mode, values in by_mode.items()}
        for agent, by_mode in samples.items()
    }
    if groups:
        figures[f"group of {group_n} opencode"] = groups
    return figures


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values), 3),
        "p90": round(percentile(values, 0.9), 3),
        "p99": round(percentile(values, 0.99), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--agents", default=",".join(AGENTS))
    parser.add_argument("--group-n", type=int, default=8, help="0: no group")
    parser.add_argument("--group-wait", type=float, default=30.0)
    args = parser.parse_args()
    agents = [name for name in args.agents.split(",") if name]
    with tempfile.TemporaryDirectory() as state:
        servers = {
            "cold": ServerProcess(Path(state) / "cold", env=COLD_ENV),
            "current": ServerProcess(Path(state) / "current"),
        }
        try:
            targets = {mode: server.start() for mode, server in servers.items()}
            figures = asyncio.run(
                measure(targets, agents, args.runs, args.group_n, args.group_wait)
            )
            handed = servers["current"].text().count(HANDED_OVER)
        finally:
            for server in servers.values():
                server.stop()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "agent_start.json").write_text(json.dumps(figures, indent=2))
    print(f"AGENT start to the first model call, seconds ({args.runs} rollouts each):\n")
    print("| harness | cold p50 | cold p99 | current p50 | current p99 | p50 cold/current |")
    print("|---|---|---|---|---|---|")
    for agent in agents:
        cold, now = figures[agent]["cold"], figures[agent]["current"]
        ratio = cold["p50"] / now["p50"] if now["p50"] else float("nan")
        print(
            f"| {agent} | {cold['p50']:.2f} | {cold['p99']:.2f} | {now['p50']:.2f} | "
            f"{now['p99']:.2f} | {ratio:.2f}x |"
        )
    total = (args.runs + 2) * len(agents) + 2 * args.group_n
    print(f"\nhanded to an agent started ahead: {handed} of the current server's {total}")
    group = figures.get(f"group of {args.group_n} opencode")
    if group:
        print(f"\nA group of {args.group_n} opencode members, seconds:\n")
        print("| server | first calls' spread | AGENT start to first call p50 |")
        print("|---|---|---|")
        for mode in MODES:
            print(f"| {mode} | {group[mode]['spread_s']:.2f} | {group[mode]['p50']:.2f} |")


if __name__ == "__main__":
    main()
