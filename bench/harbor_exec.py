"""Run by bench/bench_harbor.py with Harbor's interpreter (.harbor-venv, Python 3.12): the
Harbor environment's `exec` of `true` against the session's own Exec of `true`, interleaved.

It makes `rollout_client.harbor_env.RolloutEnvironment` as a trial would (the task's
environment config, a trial directory), starts it (a session on the server at TARGET), warms
both paths, then times N `environment.exec("true")` and N `AsyncRolloutClient.exec` of `true`
on that same session, one at a time (c1). Prints one JSON object: the seconds of each call,
`{"harbor": [...], "grpc": [...]}`; bench/bench_harbor.py turns them into figures.

    .harbor-venv/bin/python bench/harbor_exec.py TARGET TASK_DIR TRIAL_DIR [-n 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from harbor.models.task.task import Task
from harbor.models.trial.paths import TrialPaths
from rollout.v1 import rollout_pb2 as pb
from rollout_client.aio import AsyncRolloutClient
from rollout_client.harbor_env import RolloutEnvironment

_WARM = 20
_SESSION = "bench-harbor-exec"


async def _measure(target: str, task_dir: Path, trial_dir: Path, n: int) -> dict[str, list[float]]:
    task = Task(task_dir)
    trial_dir.mkdir(parents=True, exist_ok=True)
    environment = RolloutEnvironment(
        environment_dir=task.paths.environment_dir,
        environment_name=task_dir.name,
        session_id=_SESSION,
        trial_paths=TrialPaths(trial_dir),
        task_env_config=task.config.environment,
        target=target,
    )
    times: dict[str, list[float]] = {"harbor": [], "grpc": []}
    await environment.start(force_build=False)
    try:
        async with AsyncRolloutClient(target, token="") as client:
            # The environment labels its session with Harbor's session id.
            listed = await client.list_sessions(labels={"harbor_session": _SESSION})
            (session_id,) = [s.id for s in listed.sessions if s.status == pb.SESSION_STATUS_READY]
            for _ in range(_WARM):
                await environment.exec("true")
                await client.exec(session_id, "true")
            for _ in range(n):
                began = time.perf_counter()
                through_harbor = await environment.exec("true")
                times["harbor"].append(time.perf_counter() - began)
                began = time.perf_counter()
                through_grpc = await client.exec(session_id, "true")
                times["grpc"].append(time.perf_counter() - began)
                assert through_harbor.return_code == 0, through_harbor
                assert through_grpc.exit_code == 0, through_grpc
    finally:
        await environment.stop(delete=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target")
    parser.add_argument("task_dir", type=Path)
    parser.add_argument("trial_dir", type=Path)
    parser.add_argument("-n", type=int, default=300)
    arguments = parser.parse_args()
    times = asyncio.run(
        _measure(arguments.target, arguments.task_dir, arguments.trial_dir, arguments.n)
    )
    print(json.dumps(times))


if __name__ == "__main__":
    main()
