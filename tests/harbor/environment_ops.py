"""Run by tests/harbor/test_environment.py with Harbor's interpreter (.harbor-venv): each of
the environment's operations called as Harbor's trial calls them, on a session of the server
at TARGET, with what each gave printed as one JSON object for the test to judge.

    .harbor-venv/bin/python tests/harbor/environment_ops.py TARGET TASK_DIR WORK_DIR
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from harbor.models.task.task import Task
from harbor.models.trial.paths import TrialPaths
from rollout.v1 import rollout_pb2 as pb
from rollout_client.aio import AsyncRolloutClient
from rollout_client.harbor_env import RolloutEnvironment


def _environment(
    target: str, task_dir: Path, trial_dir: Path, *, verify: bool = False
) -> RolloutEnvironment:
    task = Task(task_dir)
    trial_dir.mkdir(parents=True, exist_ok=True)
    return RolloutEnvironment(
        environment_dir=task.paths.environment_dir,
        environment_name=task_dir.name,
        session_id=f"ops-{task_dir.name}",
        trial_paths=TrialPaths(trial_dir),
        task_env_config=task.config.environment,
        target=target,
        verify=verify,
    )


_REFUSALS = (RuntimeError, OSError, ValueError)
"""What a refused call may raise (SessionEnvironmentError, TimeoutError, FileNotFoundError
...): which one, and its line, is the test's to judge."""


def _refusal(call: Any) -> str:
    """The one line a refused call raises with (its type too), or "" if it was not refused."""
    try:
        call()
    except _REFUSALS as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


async def _async_refusal(call: Any) -> str:
    try:
        await call()
    except _REFUSALS as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


def _tree(root: Path) -> dict[str, list[Any]]:
    """Each file under `root`: its content and whether it is executable."""
    return {
        str(p.relative_to(root)): [p.read_text(), p.stat().st_mode & 0o100 != 0]
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


async def _operations(target: str, task_dir: Path, work: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    compose = work / "compose-task"
    shutil.copytree(task_dir, compose)
    (compose / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    seen["compose"] = _refusal(lambda: _environment(target, compose, work / "compose-trial"))

    upload = work / "upload"
    (upload / "sub").mkdir(parents=True)
    (upload / "a.txt").write_text("alpha\n")
    (upload / "sub" / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (upload / "sub" / "run.sh").chmod(0o755)

    environment = _environment(target, task_dir, work / "trial")
    capabilities = environment.capabilities
    seen["capabilities"] = {
        "disable_internet": capabilities.disable_internet,
        "gpus": capabilities.gpus,
        "mounted": capabilities.mounted,
    }
    await environment.start(force_build=False)
    try:
        async with AsyncRolloutClient(target) as client:
            session = await client.get(environment._session_id())
        seen["network"] = pb.NetworkPolicy.Name(session.spec.sandbox.network)
        pwd = await environment.exec("pwd", cwd="/tmp")
        seen["cwd"] = pwd.stdout.strip()
        variable = await environment.exec('printf %s "$GREETING"', env={"GREETING": "hi there"})
        seen["env"] = variable.stdout
        streams = await environment.exec("echo out; echo err >&2; exit 7")
        seen["streams"] = [streams.stdout, streams.stderr, streams.return_code]
        seen["timeout"] = await _async_refusal(lambda: environment.exec("sleep 60", timeout_sec=1))
        seen["user"] = await _async_refusal(lambda: environment.exec("true", user="somebody-else"))

        await environment.upload_file(upload / "a.txt", "/tmp/up/a.txt")
        await environment.upload_dir(upload, "/tmp/updir")
        listed = await environment.exec(
            "cat /tmp/up/a.txt && cat /tmp/updir/a.txt && /tmp/updir/sub/run.sh"
        )
        seen["uploaded"] = [listed.stdout, listed.return_code]
        await environment.download_file("/tmp/up/a.txt", work / "down" / "a.txt")
        seen["downloaded_file"] = (work / "down" / "a.txt").read_text()
        await environment.exec("mkdir -p /tmp/made/deep && echo deep > /tmp/made/deep/d.txt")
        await environment.download_dir("/tmp/made", work / "made")
        seen["downloaded_dir"] = _tree(work / "made")
        seen["missing"] = await _async_refusal(
            lambda: environment.download_file("/tmp/no-such-file", work / "never")
        )
    finally:
        await environment.stop(delete=True)
    seen["after_stop"] = await _async_refusal(lambda: environment.exec("true"))

    # The task's resources and network policy, as Harbor reads them, are the session's.
    bounded = work / "bounded-task"
    shutil.copytree(task_dir, bounded)
    with (bounded / "task.toml").open("a") as toml:
        toml.write('\n[environment]\nmemory_mb = 1536\nnetwork_mode = "no-network"\n')
    environment = _environment(target, bounded, work / "bounded-trial")
    await environment.start(force_build=False)
    try:
        async with AsyncRolloutClient(target) as client:
            session = await client.get(environment._session_id())
        sandbox = session.spec.sandbox
        seen["bounded"] = [pb.NetworkPolicy.Name(sandbox.network), sandbox.resources.memory_mb]
    finally:
        await environment.stop(delete=True)

    # verify=true: the service's own verification at stop, after the task's solution ran.
    verified = _environment(target, task_dir, work / "verified-trial", verify=True)
    await verified.start(force_build=False)
    try:
        await verified.upload_dir(task_dir / "solution", "/solution")
        solved = await verified.exec("bash /solution/solve.sh")
        seen["solved"] = solved.return_code
    finally:
        await verified.stop(delete=True)
    record = json.loads((work / "verified-trial" / "rollout-session.json").read_text())
    seen["verified"] = [record["status"], record["reward"]]
    return seen


def main() -> None:
    target, task_dir, work = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    print(json.dumps(asyncio.run(_operations(target, task_dir, work))))


if __name__ == "__main__":
    main()
