"""Harbor on this service, each figure against the service's own call in the same run, on one
server (loopback, a temporary state directory; image sandboxes, so root):

- a trial: `harbor run --env rollout_client.harbor_env:RolloutEnvironment` with Harbor's oracle
  agent over tests/harbor/tasks/needs_root, against one RunRollout of the same task (uploaded as
  `harbor_task.archive`, as the environment uploads it) with the service's oracle harness,
  interleaved; per phase from Harbor's trial result.json and the rollout's PhaseTimings:
  start (Harbor's environment_setup + agent_setup; the service's creating_sandbox +
  preparing_agent + setup), agent, verify, teardown (Harbor's: verifier end to trial end; the
  service's collecting + teardown), the trial's total, and the `harbor run` process's wall time;
- Harbor's CLI start-up alone (`harbor run --help`: its imports), so the trial's figure is not
  charged for it;
- exec: the environment's `exec("true")` against the session's Exec of `true` on the same
  session, c1 p50/p99 (bench/harbor_exec.py, in Harbor's interpreter).

Needs .harbor-venv (`make harbor-venv`); without it, or without root, says so and exits 0.
Writes bench/results/harbor.json.

    python bench/bench_harbor.py [--trials 5] [--execs 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rollout.v1 import rollout_pb2 as pb
from rollout_client import AsyncRolloutClient
from rollout_client.cli_connection import Connection
from rollout_client.harbor_pack import pack_task_dir
from rollout_client.local_server import served

from bench.bench_sandbox import percentile
from testing.harbor_offline import HARBOR_OFFLINE_ENV

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
HARBOR_PYTHON = ROOT / ".harbor-venv" / "bin" / "python"
HARBOR_CLI = [str(HARBOR_PYTHON), "-m", "harbor.cli.main"]
TASK = ROOT / "tests" / "harbor" / "tasks" / "needs_root"
ENVIRONMENT = "rollout_client.harbor_env:RolloutEnvironment"
HARBOR_ENV = {**os.environ, **HARBOR_OFFLINE_ENV}
"""Harbor's processes kept to loopback (`testing.harbor_offline`)."""
PHASES = ("start", "agent", "verify", "teardown", "total")
Phases = dict[str, float]


def _span(timing: dict[str, Any] | None) -> float:
    if not timing or not timing.get("started_at") or not timing.get("finished_at"):
        return 0.0
    return _seconds_between(timing["started_at"], timing["finished_at"])


def _seconds_between(began: str, ended: str) -> float:
    return (datetime.fromisoformat(ended) - datetime.fromisoformat(began)).total_seconds()


def harbor_phases(result: dict[str, Any]) -> Phases:
    """Seconds of each phase of a Harbor trial, from its result.json."""
    verifier_end = (result.get("verifier") or {}).get("finished_at") or result["finished_at"]
    return with_between(
        {
            "start": _span(result.get("environment_setup")) + _span(result.get("agent_setup")),
            "agent": _span(result.get("agent_execution")),
            "verify": _span(result.get("verifier")),
            "teardown": _seconds_between(verifier_end, result["finished_at"]),
            "total": _seconds_between(result["started_at"], result["finished_at"]),
        }
    )


def rollout_phases(timings: pb.PhaseTimings) -> Phases:
    """Seconds of the same phases of a rollout, from its PhaseTimings."""
    start = timings.creating_sandbox.ToTimedelta() + timings.preparing_agent.ToTimedelta()
    return with_between(
        {
            "start": (start + timings.setup.ToTimedelta()).total_seconds(),
            "agent": timings.agent.ToTimedelta().total_seconds(),
            "verify": timings.verifying.ToTimedelta().total_seconds(),
            "teardown": (
                timings.collecting.ToTimedelta() + timings.teardown.ToTimedelta()
            ).total_seconds(),
            "total": (timings.queued.ToTimedelta() + timings.total.ToTimedelta()).total_seconds(),
        }
    )


def with_between(phases: Phases) -> Phases:
    """The phases and what the total holds outside them (Harbor's work between its timed
    phases, such as downloading the agent's logs; the service's queue and phase changes)."""
    named = sum(phases[name] for name in PHASES if name != "total")
    return {**phases, "between": phases["total"] - named}


def harbor_trial(dataset: Path, jobs: Path, target: str) -> tuple[Phases, float]:
    """One `harbor run` of the oracle over the dataset: its phases, and the process's wall time."""
    command = [
        *HARBOR_CLI, "run", "-p", str(dataset), "-a", "oracle", "-o", str(jobs), "-n", "1",
        "--env", ENVIRONMENT, "--ek", f"target={target}",
    ]  # fmt: skip
    began = time.perf_counter()
    done = subprocess.run(
        command, env=HARBOR_ENV, capture_output=True, text=True, timeout=900, check=False
    )
    wall = time.perf_counter() - began
    assert done.returncode == 0, done.stdout + done.stderr
    (result_path,) = jobs.glob("*/*/result.json")
    result: dict[str, Any] = json.loads(result_path.read_text())
    assert result.get("exception_info") is None, result["exception_info"]
    reward = ((result.get("verifier_result") or {}).get("rewards") or {}).get("reward")
    assert reward == 1, result.get("verifier_result")
    return harbor_phases(result), wall


async def one_rollout(client: AsyncRolloutClient, spec: pb.RolloutSpec) -> tuple[Phases, float]:
    """One RunRollout of the task: its phases, and the call's wall time."""
    began = time.perf_counter()
    rollout = await client.run(spec)
    wall = time.perf_counter() - began
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout
    assert rollout.result.reward == 1.0, rollout.result
    return rollout_phases(rollout.result.timings), wall


def cli_start(runs: int) -> list[float]:
    """Seconds of `harbor run --help`: Harbor's CLI importing itself, no trial."""
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(
            [*HARBOR_CLI, "run", "--help"], env=HARBOR_ENV, capture_output=True, check=True
        )
        times.append(time.perf_counter() - began)
    return times


async def trials(target: str, scratch: Path, count: int) -> dict[str, list[Phases]]:
    """`count` Harbor trials and `count` RunRollouts, interleaved, after one untimed of each."""
    dataset = scratch / "dataset"
    shutil.copytree(TASK, dataset / TASK.name)
    spec = pb.RolloutSpec(
        agent=pb.Agent(name="oracle"),
        harbor_task=pb.HarborTask(archive=pack_task_dir(dataset / TASK.name)),
    )
    runs: dict[str, list[Phases]] = {"harbor": [], "service": []}
    async with AsyncRolloutClient(target, token="") as client:
        await one_rollout(client, spec)  # builds the task's image once
        await asyncio.to_thread(harbor_trial, dataset, scratch / "jobs-warm", target)
        for i in range(count):
            phases, wall = await asyncio.to_thread(harbor_trial, dataset, scratch / f"{i}", target)
            runs["harbor"].append({**phases, "process": wall})
            phases, wall = await one_rollout(client, spec)
            runs["service"].append({**phases, "process": wall})
    return runs


def exec_times(target: str, scratch: Path, execs: int) -> dict[str, list[float]]:
    script = Path(__file__).parent / "harbor_exec.py"
    command = [str(HARBOR_PYTHON), str(script), target, str(TASK), str(scratch / "exec-trial")]
    done = subprocess.run(
        [*command, "-n", str(execs)],
        env=HARBOR_ENV,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    times: dict[str, list[float]] = json.loads(done.stdout.splitlines()[-1])
    return times


def median_phases(runs: list[Phases]) -> Phases:
    return {name: statistics.median(run[name] for run in runs) for name in runs[0]}


def figures_of(
    runs: dict[str, list[Phases]], help_s: list[float], execs: dict[str, list[float]]
) -> dict[str, Any]:
    harbor, service = median_phases(runs["harbor"]), median_phases(runs["service"])
    trial = {
        name: {
            "harbor_s": round(harbor[name], 3),
            "service_s": round(service[name], 3),
            # A phase the service spends ~nothing in has no meaningful ratio: see the seconds.
            "ratio": round(harbor[name] / service[name], 2) if service[name] > 0.01 else None,
        }
        for name in (*PHASES, "between", "process")
    }
    exec_ms = {
        f"{path}_{name}_ms": round(percentile(times, q) * 1000, 2)
        for path, times in execs.items()
        for name, q in (("p50", 0.5), ("p99", 0.99))
    }
    for name in ("p50", "p99"):
        ratio = exec_ms[f"harbor_{name}_ms"] / exec_ms[f"grpc_{name}_ms"]
        exec_ms[f"ratio_{name}"] = round(ratio, 2)
    outside = [run["process"] - run["total"] for run in runs["harbor"]]
    return {
        "trials": len(runs["harbor"]),
        "trial": trial,
        "harbor_outside_trial_s": round(statistics.median(outside), 3),
        "cli_help_s": round(statistics.median(help_s), 3),
        "execs": len(execs["grpc"]),
        "exec": exec_ms,
        "load_average_1m": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count() or 0,
    }


def report(figures: dict[str, Any]) -> None:
    print(f"a trial, median of {figures['trials']} each, interleaved, seconds:")
    print("| phase | harbor run --env | RunRollout | ratio |\n|---|---|---|---|")
    for name, row in figures["trial"].items():
        ratio = "-" if row["ratio"] is None else f"{row['ratio']}x"
        print(f"| {name} | {row['harbor_s']} | {row['service_s']} | {ratio} |")
    print("process: the `harbor run` process's wall time; the RunRollout call's")
    print(f"`harbor run` outside its trial: {figures['harbor_outside_trial_s']} s, of which")
    print(f"`harbor run --help` alone (CLI start-up): {figures['cli_help_s']} s")
    e = figures["exec"]
    print(f"exec of `true`, {figures['execs']} each, interleaved, c1:")
    print("| path | p50 ms | p99 ms |\n|---|---|---|")
    print(f"| Exec (gRPC) | {e['grpc_p50_ms']} | {e['grpc_p99_ms']} |")
    print(f"| environment.exec (Harbor) | {e['harbor_p50_ms']} | {e['harbor_p99_ms']} |")
    print(f"ratio {e['ratio_p50']}x p50, {e['ratio_p99']}x p99")
    print(f"load average (1 min) at the end: {figures['load_average_1m']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--execs", type=int, default=300)
    arguments = parser.parse_args()
    if not HARBOR_PYTHON.exists():
        print("skipped: no .harbor-venv (Harbor needs Python 3.12+: make harbor-venv)")
        return 0
    if os.geteuid() != 0:
        print("skipped: the task's image sandboxes need a root server")
        return 0
    # The environment uploads the task directory: its Dockerfile is built only when trusted.
    os.environ["ROLLOUT_HARBOR_UPLOAD_BUILDS"] = "true"
    with (
        tempfile.TemporaryDirectory(prefix="bench-harbor-") as scratch,
        served(Connection(target=""), local=True) as connection,
    ):
        runs = asyncio.run(trials(connection.target, Path(scratch), arguments.trials))
        execs = exec_times(connection.target, Path(scratch), arguments.execs)
    help_s = cli_start(arguments.trials)
    figures = figures_of(runs, help_s, execs)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "harbor.json").write_text(json.dumps(figures, indent=2) + "\n")
    report(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
