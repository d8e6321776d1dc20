"""A group of 16 against 16 separate rollouts of the same spec, whose setup is heavy.

The spec's setup writes files for about 2 s of one core's work (a fixed amount of work,
calibrated on this machine first, so contention shows as wall time rather than less work);
the agent reads one file and the verifier checks it. Each round runs, on fresh servers
(16 running slots each):

- group: RunGroup with n=16 (setup once in a template sandbox, each member starts from
  its snapshot, copy-on-write);
- separate: 16 concurrent RunRollout calls of the same spec (setup 16 times).

Reported per approach: wall time of the call(s), how many times setup ran, and the CPU
seconds setup took in all (each setup reports its own with bash's `times`; the rest of a
rollout's CPU is the same either way, and sandbox processes are not all the server's
descendants, so the server's rusage cannot give a whole figure; a machine-wide one carries
the neighbours' load on a shared machine). Prints a markdown table and writes
bench/results/groups.json.

    python bench/bench_groups.py [--rounds 2] [--n 16] [--setup-s 2]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess

RESULTS = Path(__file__).parent / "results"
_WORK = """python3 - <<'PY'
import hashlib, os
os.makedirs("deps", exist_ok=True)
block = b"x" * 4096
for i in range({iterations}):
    block = hashlib.sha256(block).digest() * 128
    if i % 50 == 0:
        with open(f"deps/part{{i // 50:05d}}.bin", "wb") as out:
            out.write(block)
PY
times"""


def calibrate(seconds: float) -> int:
    """Iterations of the setup's loop that take `seconds` of one core here."""
    block, count, began = b"x" * 4096, 0, time.process_time()
    while time.process_time() - began < 0.5:
        block = hashlib.sha256(block).digest() * 128
        count += 1
    return int(count * seconds / (time.process_time() - began))


def heavy_spec(iterations: int) -> pb.RolloutSpec:
    return pb.RolloutSpec(
        task=pb.Task(
            instruction="use the prepared files",
            setup=[_WORK.format(iterations=iterations)],
            verify=["test -s seen.txt"],
        ),
        agent=pb.Agent(name="command", command="ls deps | wc -l > seen.txt"),
    )


Setups = tuple[int, float]
"""How many times setup ran, and the CPU seconds it took in all."""


def setup_cpu_s(result: pb.CommandResult) -> float:
    """The children's user + system time from the last line `times` printed."""
    user, system = result.stdout.strip().splitlines()[-1].split()
    return sum(_seconds(value) for value in (user, system))


def _seconds(value: str) -> float:
    minutes, seconds = value.removesuffix("s").split("m")
    return int(minutes) * 60 + float(seconds)


async def run_group(stub: pb_grpc.RolloutServiceAsyncStub, spec: pb.RolloutSpec, n: int) -> Setups:
    group = (await stub.RunGroup(pb.RunGroupRequest(spec=pb.GroupSpec(spec=spec, n=n)))).group
    assert group.status == pb.GROUP_STATUS_COMPLETED, group
    assert group.stats.counted == n
    member = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=group.members[0].rollout_id))
    [setup] = member.rollout.result.setup_results  # the template's, which every member shows
    return group.template_setups, group.template_setups * setup_cpu_s(setup)


async def run_separate(
    stub: pb_grpc.RolloutServiceAsyncStub, spec: pb.RolloutSpec, n: int
) -> Setups:
    responses = await asyncio.gather(
        *(stub.RunRollout(pb.RunRolloutRequest(spec=spec)) for _ in range(n))
    )
    assert all(r.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED for r in responses)
    setups = [s for r in responses for s in r.rollout.result.setup_results]
    return len(setups), sum(setup_cpu_s(s) for s in setups)


Approach = Callable[["pb_grpc.RolloutServiceAsyncStub", pb.RolloutSpec, int], Awaitable[Setups]]


def measure(approach: Approach, spec: pb.RolloutSpec, n: int) -> dict[str, float]:
    """Wall seconds, setup runs and setup CPU seconds of one approach on a fresh server."""
    with tempfile.TemporaryDirectory() as state:
        server = ServerProcess(
            Path(state),
            env={
                "ROLLOUT_MAX_RUNNING": str(n),
                "ROLLOUT_MAX_QUEUED": str(n),
                "ROLLOUT_LOG_LEVEL": "WARNING",
            },
        )
        target = server.start()
        try:
            wall_s, (setups, cpu_s) = asyncio.run(_timed(approach, target, spec, n))
        finally:
            server.stop()
    return {"wall_s": round(wall_s, 2), "setup_runs": setups, "setup_cpu_s": round(cpu_s, 2)}


async def _timed(
    approach: Approach, target: str, spec: pb.RolloutSpec, n: int
) -> tuple[float, Setups]:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        warm = pb.RolloutSpec(task=pb.Task(instruction="warm"), agent=pb.Agent(command="true"))
        await stub.RunRollout(pb.RunRolloutRequest(spec=warm))  # the first sandbox, caches
        began = time.perf_counter()
        setups = await approach(stub, spec, n)
        return time.perf_counter() - began, setups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--setup-s", type=float, default=2.0, help="setup work, one core")
    args = parser.parse_args()
    spec = heavy_spec(calibrate(args.setup_s))
    rounds: list[dict[str, dict[str, float]]] = []
    for _ in range(args.rounds):
        rounds.append(
            {
                "group": measure(run_group, spec, args.n),
                "separate": measure(run_separate, spec, args.n),
            }
        )
    figures = {
        name: {
            key: statistics.median(r[name][key] for r in rounds)
            for key in ("wall_s", "setup_runs", "setup_cpu_s")
        }
        for name in ("group", "separate")
    }
    ratio = figures["group"]["wall_s"] / figures["separate"]["wall_s"]
    result = {"n": args.n, "setup_s": args.setup_s, "rounds": rounds, "median": figures}
    result["wall_ratio"] = round(ratio, 3)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "groups.json").write_text(json.dumps(result, indent=2))
    print(f"n={args.n}, setup ~{args.setup_s:g} s of one core, median of {args.rounds} rounds")
    print("| approach | wall s | setup runs | setup CPU s |")
    print("|---|---|---|---|")
    for name in ("group", "separate"):
        row = figures[name]
        print(f"| {name} | {row['wall_s']} | {row['setup_runs']:g} | {row['setup_cpu_s']} |")
    print(f"\ngroup / separate wall time: {ratio:.2f}x (target <= 0.5x)")


if __name__ == "__main__":
    main()
