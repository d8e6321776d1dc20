"""One full opencode rollout through the real server, against the scripted upstream.

Reports wall time split by phase (the result's PhaseTimings), averaged over a few runs,
and writes bench/results/opencode.json.

    python bench/bench_opencode.py [--runs 3]
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
from google.protobuf import json_format

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from testing.server_process import ServerProcess

RESULTS = Path(__file__).parent / "results"
PHASES = ("creating_sandbox", "preparing_agent", "setup", "agent", "verifying", "collecting")


def spec(upstream: FakeUpstream) -> pb.RolloutSpec:
    return pb.RolloutSpec(
        task=pb.Task(instruction="Create hello.txt.", verify=["grep -qx hello hello.txt"]),
        agent=pb.Agent(name="opencode"),
        endpoint=pb.Endpoint(base_url=upstream.base_url, api_key="sk-bench", model="policy"),
    )


async def one_rollout(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> dict[str, float]:
    arguments = json.dumps({"filePath": "hello.txt", "content": "hello"})
    upstream.script(Reply(tool_calls=[ToolCallReply("write", arguments)]), match=has_tools)
    began = time.perf_counter()
    response = await stub.RunRollout(pb.RunRolloutRequest(spec=spec(upstream)))
    wall = time.perf_counter() - began
    rollout = response.rollout
    if rollout.result.reward != 1.0:
        raise RuntimeError(f"rollout did not score: {rollout.result.error}")
    timings = json_format.MessageToDict(rollout.result.timings)
    seconds = {name: float(timings.get(_camel(name), "0s").rstrip("s")) for name in PHASES}
    return {**seconds, "wall": wall, "turns": float(len(rollout.result.turns))}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


async def measure(target: str, runs: int) -> dict[str, float]:
    async with (
        FakeUpstream(api_key="sk-bench", model="policy") as upstream,
        grpc.aio.insecure_channel(target) as channel,
    ):
        stub = pb_grpc.RolloutServiceStub(channel)
        samples = [await one_rollout(stub, upstream) for _ in range(runs)]
    return {key: round(statistics.mean(s[key] for s in samples), 3) for key in samples[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        server = ServerProcess(Path(state), env={"ROLLOUT_LOG_LEVEL": "WARNING"})
        target = server.start()
        try:
            figures = asyncio.run(measure(target, args.runs))
        finally:
            server.stop()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "opencode.json").write_text(json.dumps(figures, indent=2))
    print(f"one opencode rollout (mean of {args.runs}), seconds per phase:\n")
    print("| " + " | ".join((*PHASES, "wall")) + " |")
    print("|" + "---|" * (len(PHASES) + 1))
    print("| " + " | ".join(f"{figures[name]:.2f}" for name in (*PHASES, "wall")) + " |")


if __name__ == "__main__":
    main()
