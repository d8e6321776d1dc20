"""Pausing model calls for a weight sync: pause -> drained, resume -> released, calls lost.

N rollouts (real server, local sandboxes) each run a scripted agent making ROUNDS chat calls
through the capture proxy to a scripted upstream that answers each after DELAY. A round:
once all N calls are in flight at the upstream, PauseModelCalls (by label) and time until it
returns (drained: the in-flight calls finished); the agents' next calls now wait at the
proxy; once every agent has announced its next call, SetPolicyVersion, then ResumeModelCalls,
and time from the resume to each call's arrival at the upstream. The last round aborts the
calls in flight instead (they are retried after the resume). A call is lost when a rollout
does not end SUCCEEDED with ROUNDS clean turns (a rollout that failed before its agent
called, an infrastructure failure, is counted apart). Prints a markdown table and writes
bench/results/pause.json.

    python bench/bench_pause.py [--rollouts 200] [--rounds 6] [--delay-ms 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream, Reply
from testing.server_process import ServerProcess
from testing.specs import model_calls

RESULTS = Path(__file__).parent / "results"
MODEL = "bench-policy"


class TimedUpstream(FakeUpstream):
    """The scripted upstream, noting when each request arrived."""

    def __init__(self) -> None:
        super().__init__(model=MODEL)
        self.arrivals: list[float] = []

    def _remember(self, request: web.Request, raw: bytes, body: dict[str, object] | None) -> None:
        self.arrivals.append(time.perf_counter())
        super()._remember(request, raw, body)


class Announcements:
    """Counts the agents' "calling i" lines, and the rollouts that ended, from a label-wide
    watch (a rollout that ended early announces nothing more)."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.ended = 0
        self.changed = asyncio.Event()

    async def follow(self, stub: pb_grpc.RolloutServiceAsyncStub, labels: dict[str, str]) -> None:
        async for response in stub.WatchRollout(pb.WatchRolloutRequest(labels=labels)):
            event = response.event
            self.ended += event.HasField("finished")
            for line in event.output.text.splitlines():
                if line.startswith("calling "):
                    call = int(line.split()[1])
                    self.counts[call] = self.counts.get(call, 0) + 1
            self.changed.set()

    async def wait(self, call: int, count: int) -> None:
        while self.counts.get(call, 0) + self.ended < count:
            self.changed.clear()
            await self.changed.wait()


async def finished_rollout(stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str) -> pb.Rollout:
    async for response in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id)):
        if response.event.HasField("finished"):
            break
    return (await stub.GetRollout(pb.GetRolloutRequest(rollout_id=rollout_id))).rollout


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def gate_releases(rollouts: list[pb.Rollout], resumes: dict[int, float]) -> list[float]:
    """Milliseconds from each resume to each held call passing the proxy's gate, from the
    turns (reached the proxy at `start_time`, waited `paused`): the proxy's own figure, apart
    from how fast this process's fake upstream takes the calls in."""
    figures = []
    for rollout in rollouts:
        for turn in rollout.result.turns:
            resumed = resumes.get(turn.policy_version_start)
            waited = turn.paused.ToTimedelta().total_seconds()
            if resumed is not None and waited > 0:
                released = turn.start_time.ToDatetime().timestamp() + waited
                figures.append((released - resumed) * 1000)
    return figures


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(target: str, rollouts: int, rounds: int, delay_s: float) -> dict[str, object]:
    labels = {"bench": uuid.uuid4().hex}
    selector = pb.ModelCallSelector(labels=pb.LabelSelector(labels=labels))
    drains: list[dict[str, float]] = []
    releases: list[float] = []
    firsts: list[float] = []
    resumes: dict[int, float] = {}
    """Wall time of each round's resume, by the policy version its released calls start at."""
    upstream = TimedUpstream()
    async with upstream, grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        upstream.script(*[Reply(text="ok", delay_s=delay_s)] * (rollouts * (rounds + 1)))
        announced = Announcements()
        watcher = asyncio.ensure_future(announced.follow(stub, labels))
        spec = pb.RolloutSpec(
            task=pb.Task(instruction="call the model"),
            agent=pb.Agent(name="command", command=model_calls(rounds, timeout_s=600)),
            endpoint=pb.Endpoint(base_url=upstream.base_url, model=MODEL),
            labels=labels,
        )
        # Paused before they start: every agent's first call waits at the proxy.
        await stub.PauseModelCalls(pb.PauseModelCallsRequest(selector=selector))
        ids = [
            (await stub.StartRollout(pb.StartRolloutRequest(spec=spec))).rollout.id
            for _ in range(rollouts)
        ]
        expected = aborted = 0
        for call in range(rounds):
            await announced.wait(call, rollouts - aborted)
            progress(f"round {call}: {announced.counts.get(call, 0)} calls announced")
            await asyncio.sleep(0.5)  # the announced calls reach the proxy and wait there
            await stub.SetPolicyVersion(
                pb.SetPolicyVersionRequest(selector=selector, version=call + 1)
            )
            seen = len(upstream.arrivals)
            resumed_at = time.perf_counter()
            if not aborted:  # a retried call's turn does not show when it was released
                resumes[call + 1] = time.time()
            resumed = await stub.ResumeModelCalls(pb.ResumeModelCallsRequest(selector=selector))
            expected += resumed.calls_released
            await upstream.wait_for_requests(expected)  # every released call is in flight
            progress(f"round {call}: {resumed.calls_released} calls released")
            released = [(t - resumed_at) * 1000 for t in upstream.arrivals[seen:]]
            releases += released
            firsts.append(min(released))
            if call >= rounds - 2 or aborted:
                break
            began = time.perf_counter()
            abort = call == rounds - 3  # the last pause aborts the calls in flight
            request = pb.PauseModelCallsRequest(selector=selector, abort_in_flight=abort)
            drained = await stub.PauseModelCalls(request)
            aborted = drained.calls_aborted
            drains.append(
                {
                    "ms": (time.perf_counter() - began) * 1000,
                    "finished": drained.calls_finished,
                    "aborted": aborted,
                }
            )
        finished = [await finished_rollout(stub, rollout_id) for rollout_id in ids]
        watcher.cancel()
    at_gate = gate_releases(finished, resumes)
    calling = announced.counts.get(0, 0)  # a rollout that failed before calling is not lost
    waited = [d["ms"] for d in drains if not d["aborted"]] or [d["ms"] for d in drains]
    clean = sum(
        sum(1 for turn in r.result.turns if not turn.upstream_error)
        for r in finished
        if r.status == pb.ROLLOUT_STATUS_SUCCEEDED
    )
    return {
        "rollouts": rollouts,
        "rounds": rounds,
        "upstream_delay_ms": delay_s * 1000,
        "resume_to_first_release_at_start_ms": round(firsts[0], 2),
        "pause_to_drained_ms": [round(d["ms"], 1) for d in drains],
        "pause_to_drained_p50_ms": round(statistics.median(waited), 1),
        "pause_to_drained_p99_ms": round(percentile(waited, 0.99), 1),
        "drains": drains,
        "resume_to_first_release_ms": [round(f, 2) for f in firsts],
        "calls_released": len(releases),
        "resume_to_release_p50_ms": round(statistics.median(releases), 2),
        "resume_to_release_p99_ms": round(percentile(releases, 0.99), 2),
        "resume_to_gate_release_p50_ms": round(statistics.median(at_gate), 2),
        "resume_to_gate_release_p99_ms": round(percentile(at_gate, 0.99), 2),
        "calls_lost": calling * rounds - clean,
        "rollouts_failed_before_calling": rollouts - calling,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rollouts", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=6, help="calls per agent (3 or more)")
    parser.add_argument("--delay-ms", type=float, default=300.0, help="upstream answer delay")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        server = ServerProcess(
            Path(state),
            env={
                "ROLLOUT_MAX_RUNNING": str(args.rollouts),
                "ROLLOUT_LOG_LEVEL": "WARNING",
                "ROLLOUT_SANDBOX_IMAGE": "host",
            },
        )
        target = server.start()
        try:
            figures = asyncio.run(measure(target, args.rollouts, args.rounds, args.delay_ms / 1000))
        finally:
            server.stop()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pause.json").write_text(json.dumps(figures, indent=2))
    drains = figures["drains"]
    firsts = figures["resume_to_first_release_ms"]
    assert isinstance(drains, list)
    assert isinstance(firsts, list)
    print(f"{args.rollouts} rollouts mid-call, upstream answering after {args.delay_ms:g} ms\n")
    print("| round | pause -> drained ms | finished | aborted | resume -> first release ms |")
    print("|---|---|---|---|---|")
    for index, (drain, first) in enumerate(zip(drains, firsts[1:], strict=True)):
        print(
            f"| {index + 1} | {drain['ms']:.1f} | {drain['finished']} | {drain['aborted']} "
            f"| {first} |"
        )
    print(
        f"\npause -> drained (waiting rounds): p50 {figures['pause_to_drained_p50_ms']} ms, "
        f"p99 {figures['pause_to_drained_p99_ms']} ms"
    )
    print(
        f"resume -> each held call passing the proxy's gate: p50 "
        f"{figures['resume_to_gate_release_p50_ms']} ms, "
        f"p99 {figures['resume_to_gate_release_p99_ms']} ms"
    )
    print(
        f"resume -> arrival at the (in-process) upstream, every call: "
        f"p50 {figures['resume_to_release_p50_ms']} ms, "
        f"p99 {figures['resume_to_release_p99_ms']} ms; calls lost: {figures['calls_lost']}"
        f" (rollouts that failed before calling: {figures['rollouts_failed_before_calling']})"
    )


if __name__ == "__main__":
    main()
