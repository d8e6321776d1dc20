"""What the e2b backend adds over the local one, against the fake E2B cloud and envd.

One real server subprocess serves both backends; its e2b SDK talks to the fake cloud that
this script runs on loopback (commands in the fake sandboxes run under bubblewrap, like the
local backend's). Everything is measured in the same run, local and e2b interleaved:

- overhead: the same no-op rollout (setup `true`, agent `true`, verify `true`) on each
  backend, wall time of RunRollout, and the e2b/local ratio;
- first live turn: a command agent makes one streaming chat call through the capture proxy
  (on local: the service's proxy through its socket; on e2b: the proxy started inside the
  sandbox). Reported: the time from the AGENT phase event to the first `turn` event (server
  clocks), and the PREPARING_AGENT phase, where the in-sandbox proxy is placed and started;
- with --npm (reaches the real npm registry): opencode's prepare in a fresh e2b sandbox that
  must npm-install opencode-ai against one whose template has it.

What the fake cannot show: E2B's own latency (API calls, VM boot, a real network between
the service and envd). Prints a markdown table and writes bench/results/e2b.json.

    python bench/bench_e2b.py [-n 20] [--turns 10] [--npm]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service import registry
from service.agents import AgentContext
from service.config import Settings
from service.models import NetworkPolicy, SandboxSpec
from service.sandboxes import E2BBackend, SandboxRequest
from testing.e2b_support import opencode_template
from testing.fakes.e2b_cloud import FakeE2B
from testing.fakes.llm_upstream import FakeUpstream, Reply
from testing.server_process import ServerProcess

RESULTS = Path(__file__).parent / "results"
KEY = "sk-bench-upstream"
CLIENT = """
import json, os, urllib.request
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": os.environ["OPENAI_MODEL"], "stream": True,
                     "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"},
)
urllib.request.urlopen(request).read()
"""


def _sandbox(backend: str) -> pb.SandboxSpec:
    return pb.SandboxSpec(backend=backend, template="base", network=pb.NETWORK_POLICY_NONE)


def noop_spec(backend: str) -> pb.RolloutSpec:
    task = pb.Task(instruction="noop", setup=["true"], verify=["true"])
    return pb.RolloutSpec(
        task=task, agent=pb.Agent(name="command", command="true"), sandbox=_sandbox(backend)
    )


def turn_spec(backend: str, upstream: FakeUpstream) -> pb.RolloutSpec:
    return pb.RolloutSpec(
        task=pb.Task(instruction="one model call", verify=["true"]),
        agent=pb.Agent(name="command", command=f"python3 -c {shlex.quote(CLIENT)}"),
        endpoint=pb.Endpoint(base_url=upstream.base_url, api_key=KEY, model="bench-model"),
        sandbox=_sandbox(backend),
    )


def seconds(duration: Any) -> float:
    return float(duration.seconds + duration.nanos / 1e9)


async def noop_ms(stub: pb_grpc.RolloutServiceAsyncStub, backend: str) -> float:
    began = time.perf_counter()
    request = pb.RunRolloutRequest(spec=noop_spec(backend), view=pb.RESULT_VIEW_SLIM)
    rollout = (await stub.RunRollout(request)).rollout
    if rollout.status != pb.ROLLOUT_STATUS_SUCCEEDED:
        raise RuntimeError(f"{backend} no-op rollout failed: {rollout.result.error}")
    return (time.perf_counter() - began) * 1000


async def first_turn(
    stub: pb_grpc.RolloutServiceAsyncStub, backend: str, upstream: FakeUpstream
) -> tuple[float, float]:
    """(ms from the AGENT phase event to the first turn event, PREPARING_AGENT ms)."""
    started = await stub.StartRollout(pb.StartRolloutRequest(spec=turn_spec(backend, upstream)))
    watch = pb.WatchRolloutRequest(rollout_id=started.rollout.id)
    events = [response.event async for response in stub.WatchRollout(watch)]
    finished = events[-1].finished
    if finished.status != pb.ROLLOUT_STATUS_SUCCEEDED or finished.result.turn_count != 1:
        raise RuntimeError(f"{backend} turn rollout failed: {finished.result.error}")
    agent = next(e for e in events if e.HasField("phase") and e.phase.phase == pb.PHASE_AGENT)
    turn = next(e for e in events if e.HasField("turn"))
    to_turn_ms = (turn.time.ToNanoseconds() - agent.time.ToNanoseconds()) / 1e6
    return to_turn_ms, seconds(finished.result.timings.preparing_agent) * 1000


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered), 1),
        "p90_ms": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 1),
    }


async def measure(target: str, upstream: FakeUpstream, n: int, turns: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {}
    async with grpc.aio.insecure_channel(target) as channel:
        stub: pb_grpc.RolloutServiceAsyncStub = pb_grpc.RolloutServiceStub(channel)
        for backend in ("local", "e2b"):  # warm-up: imports, first bundle build, caches
            await noop_ms(stub, backend)
            await first_turn(stub, backend, upstream)
        for _ in range(n):
            for backend in ("local", "e2b"):
                samples.setdefault(f"noop_{backend}", []).append(await noop_ms(stub, backend))
        for _ in range(turns):
            for backend in ("local", "e2b"):
                to_turn, preparing = await first_turn(stub, backend, upstream)
                samples.setdefault(f"first_turn_{backend}", []).append(to_turn)
                samples.setdefault(f"preparing_{backend}", []).append(preparing)
    figures: dict[str, Any] = {name: summary(values) for name, values in samples.items()}
    local, e2b = figures["noop_local"]["p50_ms"], figures["noop_e2b"]["p50_ms"]
    figures["noop_ratio_p50"] = round(e2b / local, 2)
    figures["noop_added_p50_ms"] = round(e2b - local, 1)
    return figures


def _npm_env() -> dict[str, str]:
    """This machine's CA bundle for npm in the sandbox (whose HOME has no .npmrc)."""
    cafile = os.environ.get("NODE_EXTRA_CA_CERTS", "")
    return {"npm_config_cafile": cafile} if cafile else {}


async def opencode_prepare_s(root: Path) -> dict[str, float]:
    """opencode's prepare in a fresh e2b sandbox (network FULL): npm install of the pinned
    opencode-ai from the real registry, against a template that has it."""
    settings = Settings(state_dir=root / "npm-state", cache_dir=root / "npm-cache")
    backend = E2BBackend(settings.model_copy(update={"e2b_creates_per_s": 0.0}))
    agent = registry.load_agent("opencode", settings)
    timings: dict[str, float] = {}
    try:
        for label, template in (("npm_install_s", "base"), ("template_s", "opencode")):
            spec = SandboxSpec(backend="e2b", template=template, network=NetworkPolicy.FULL)
            sandbox = await backend.create(SandboxRequest(f"npm-{template}", spec, 1800.0))
            context = AgentContext(f"npm-{template}", "noop", "", {}, 60.0, env=_npm_env())
            began = time.perf_counter()
            await agent.prepare(sandbox, context)
            timings[label] = round(time.perf_counter() - began, 2)
            await sandbox.kill()
    finally:
        await backend.close()
    timings["saved_s"] = round(timings["npm_install_s"] - timings["template_s"], 2)
    return timings


async def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    cloud = await FakeE2B(root / "e2b").start()
    cloud.add_template("opencode", await opencode_template())
    os.environ.update(cloud.environment())  # for this process's own SDK calls (--npm)
    try:
        async with FakeUpstream(api_key=KEY, model="bench-model") as upstream:
            upstream.default_text = "a short streamed reply"
            upstream.script(*[Reply(text="warm") for _ in range(2)])
            env = cloud.environment() | {
                "ROLLOUT_E2B_CREATES_PER_S": "0",
                "ROLLOUT_LOG_LEVEL": "WARNING",
            }
            server = ServerProcess(root / "state", env=env)
            await asyncio.to_thread(server.start)  # the fake cloud shares this loop
            try:
                figures = await measure(server.target, upstream, args.n, args.turns)
            finally:
                await asyncio.to_thread(server.stop)
        if args.npm:
            figures["opencode_prepare_s"] = await opencode_prepare_s(root)
    finally:
        await cloud.close()
    return figures


def print_table(figures: dict[str, Any]) -> None:
    print("| measure | local p50 ms | e2b p50 ms | e2b p90 ms | ratio / added |")
    print("|---|---|---|---|---|")
    rows = (
        ("no-op rollout (RunRollout wall)", "noop"),
        ("AGENT phase start -> first turn event", "first_turn"),
        ("PREPARING_AGENT (proxy placed and started)", "preparing"),
    )
    for label, key in rows:
        local, e2b = figures[f"{key}_local"], figures[f"{key}_e2b"]
        extra = (
            f"x{figures['noop_ratio_p50']} (+{figures['noop_added_p50_ms']} ms)"
            if key == "noop"
            else f"{e2b['p50_ms'] - local['p50_ms']:+.1f} ms"
        )
        print(f"| {label} | {local['p50_ms']} | {e2b['p50_ms']} | {e2b['p90_ms']} | {extra} |")
    if "opencode_prepare_s" in figures:
        npm = figures["opencode_prepare_s"]
        print(
            f"\nopencode prepare on e2b: npm install {npm['npm_install_s']} s, "
            f"template {npm['template_s']} s (saves {npm['saved_s']} s per rollout)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20, help="no-op rollouts per backend")
    parser.add_argument("--turns", type=int, default=10, help="turn rollouts per backend")
    parser.add_argument("--npm", action="store_true", help="also time npm-installing opencode")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        figures = asyncio.run(run(args, Path(directory)))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "e2b.json").write_text(json.dumps(figures, indent=2) + "\n")
    print_table(figures)


if __name__ == "__main__":
    main()
