"""AGENT start to the first model call, per harness, against the baseline in the same run.

Three servers run side by side: the baseline (`ROLLOUT_OPENCODE_EMPTY_MODELS_CACHE=false`,
opencode as before its empty models.dev cache), the current defaults, and, for the harnesses
with a warm start (`WARM_AGENTS`), the current defaults with them started ahead in warm
sandboxes (`ROLLOUT_LOCAL_WARM_AGENTS`; each one's first two rollouts teach it the plan and
are not timed; how many rollouts were handed to an agent started ahead is read from its log).
Rollouts alternate between them, one at a time, so all see the same load. Each rollout's
start is its AGENT PhaseChanged event, its first model call the earliest turn's `start_time`
(when the request reached the capture proxy). The scripted upstream answers at once, so the
figure is the harness's own start-up: process start, config, and whatever it does before it
asks the model.

Harnesses not installed yet are installed on their first rollout (PREPARING_AGENT, not timed).
Writes bench/results/agent_start.json.

    python bench/bench_agent_start.py [--runs 5] [--agents opencode,codex]
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
BASELINE_ENV = {"ROLLOUT_OPENCODE_EMPTY_MODELS_CACHE": "false"}
WARM_ENV = {"ROLLOUT_LOCAL_WARM_AGENTS": "true"}
WARM_AGENTS = ("opencode", "mini-swe-agent")
"""Harnesses that start ahead with `ROLLOUT_LOCAL_WARM_AGENTS`: measured on the warm server."""
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
    rollout = response.rollout
    if rollout.status != pb.ROLLOUT_STATUS_SUCCEEDED or not rollout.result.turns:
        tail = rollout.result.agent_log_tail[-2000:]
        raise RuntimeError(f"{agent} rollout failed: {rollout.result.error}\n{tail}")
    first_call = min(turn.start_time.ToNanoseconds() for turn in rollout.result.turns)
    return (first_call - await agent_started_ns(stub, rollout.id)) / 1e9


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
    targets: dict[str, str], agents: list[str], runs: int
) -> dict[str, dict[str, dict[str, float]]]:
    samples: dict[str, dict[str, list[float]]] = {
        a: {m: [] for m in targets if m != "warm" or a in WARM_AGENTS} for a in agents
    }
    async with FakeUpstream(api_key=KEY, model=MODEL) as upstream:
        channels = {mode: grpc.aio.insecure_channel(target) for mode, target in targets.items()}
        stubs = {mode: pb_grpc.RolloutServiceStub(channel) for mode, channel in channels.items()}
        try:
            for agent in agents:
                modes = {mode: stubs[mode] for mode in samples[agent]}
                for mode, stub in modes.items():  # warm-up: installs, first sandbox of its kind
                    for _ in range(2 if mode == "warm" else 1):  # the warm one learns the plan
                        await first_call_s(stub, upstream, agent)
                for _ in range(runs):
                    for mode, stub in modes.items():
                        samples[agent][mode].append(await first_call_s(stub, upstream, agent))
                print(f"  {agent}: {samples[agent]}", file=sys.stderr, flush=True)
        finally:
            for channel in channels.values():
                await channel.close()
    return {
        agent: {
            mode: {
                "p50": round(statistics.median(values), 3),
                "p90": round(percentile(values, 0.9), 3),
                "p99": round(percentile(values, 0.99), 3),
            }
            for mode, values in by_mode.items()
        }
        for agent, by_mode in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--agents", default=",".join(AGENTS))
    args = parser.parse_args()
    agents = [name for name in args.agents.split(",") if name]
    with tempfile.TemporaryDirectory() as state:
        servers = {
            "baseline": ServerProcess(Path(state) / "baseline", env=BASELINE_ENV),
            "current": ServerProcess(Path(state) / "current"),
        }
        if any(agent in WARM_AGENTS for agent in agents):
            servers["warm"] = ServerProcess(Path(state) / "warm", env=WARM_ENV)
        try:
            targets = {mode: server.start() for mode, server in servers.items()}
            figures = asyncio.run(measure(targets, agents, args.runs))
            handed = servers["warm"].text().count(HANDED_OVER) if "warm" in servers else 0
        finally:
            for server in servers.values():
                server.stop()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "agent_start.json").write_text(json.dumps(figures, indent=2))
    print(f"AGENT start to the first model call, seconds ({args.runs} rollouts each):\n")
    print("| harness | baseline p50 | baseline p99 | current p50 | current p99 | p50 ratio |")
    print("|---|---|---|---|---|---|")
    for agent, by_mode in figures.items():
        rows = [(agent, by_mode["baseline"], by_mode["current"])]
        if "warm" in by_mode:  # against this run's cold current: started ahead or not
            rows.append(
                (f"{agent} started ahead (vs current)", by_mode["current"], by_mode["warm"])
            )
        for name, base, now in rows:
            ratio = base["p50"] / now["p50"] if now["p50"] else float("nan")
            print(
                f"| {name} | {base['p50']:.2f} | {base['p99']:.2f} | {now['p50']:.2f} | "
                f"{now['p99']:.2f} | {ratio:.2f}x |"
            )
    if any("warm" in by_mode for by_mode in figures.values()):
        total = sum(args.runs + 2 for agent in agents if agent in WARM_AGENTS)
        print(f"\nstarted ahead: {handed} of the warm server's {total} rollouts (2 untimed)")


if __name__ == "__main__":
    main()
