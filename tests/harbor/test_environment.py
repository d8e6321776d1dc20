"""Harbor's own released CLI (`harbor run`, in .harbor-venv: `make harbor-venv`) running its
agents in this service's sessions through `rollout_client.harbor_env`, against a real server:
the oracle earns 1, the no-op agent 0; the session's ATIF export is valid under Harbor's own
trajectory models; an unreachable server, a bad token and an unknown task each
fail the trial at start with one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.export.checks import HARBOR_PYTHON, harbor_validation_error
from tests.server_process import ServerProcess

TASKS = Path(__file__).parent / "tasks"
ENVIRONMENT = "rollout_client.harbor_env:RolloutEnvironment"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
TOKEN = "harbor-env-token-5b1e"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server"),
    pytest.mark.skipif(
        not HARBOR_PYTHON.exists(),
        reason="no .harbor-venv: Harbor needs Python 3.12+ (make harbor-venv makes it)",
    ),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # Harbor uploads the task directory (harbor_task.archive): its Dockerfile is built only
    # when the operator trusts uploads.
    env = {"ROLLOUT_HARBOR_UPLOAD_BUILDS": "true"}
    process = ServerProcess(tmp_path_factory.mktemp("harbor-env-state"), env=env)
    process.start()
    yield process
    assert process.stop() == 0, process.text()


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with a bearer token and one task root (`srv-tasks`) holding no task."""
    root = tmp_path_factory.mktemp("harbor-env-roots") / "srv-tasks"
    root.mkdir()
    env = {
        "ROLLOUT_AUTH_TOKENS": json.dumps([TOKEN]),
        "ROLLOUT_TASK_ROOTS": json.dumps([str(root)]),
    }
    process = ServerProcess(tmp_path_factory.mktemp("harbor-env-guarded-state"), env=env)
    process.start()
    yield process
    assert process.stop() == 0, process.text()


def dataset_of(root: Path, task: str) -> Path:
    """A one-task dataset; an image build's TLS trusts the host's CA bundle beside it."""
    shutil.copytree(TASKS / task, root / task)
    shutil.copy(HOST_CA, root / task / "environment" / "host-ca.crt")
    return root


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dataset_of(tmp_path_factory.mktemp("harbor-dataset"), "needs_root")


def harbor_run(
    dataset: Path,
    jobs: Path,
    agent: str,
    target: str,
    *options: str,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`harbor run` of the dataset, `options` being more `--ek`, `-m` ...; its one trial's
    result, with the trial's directory."""
    command = [
        str(HARBOR_PYTHON), "-m", "harbor.cli.main", "run", "-p", str(dataset), "-a", agent,
        "-o", str(jobs), "-n", "1", "--env", ENVIRONMENT, "--ek", f"target={target}", *options,
    ]  # fmt: skip
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (trial,) = [p for p in jobs.glob("*/*") if p.is_dir()]
    result: dict[str, Any] = json.loads((trial / "result.json").read_text())
    result["trial_dir"] = trial
    return result


def reward_of(result: dict[str, Any]) -> float | None:
    verifier = result.get("verifier_result") or {}
    rewards = verifier.get("rewards") or {}
    reward = rewards.get("reward")
    return None if reward is None else float(reward)


def assert_valid_atif(trial_dir: Path) -> dict[str, Any]:
    """The session's record, its ATIF export valid under Harbor's own `Trajectory` model."""
    record: dict[str, Any] = json.loads((trial_dir / "rollout-session.json").read_text())
    assert harbor_validation_error(json.dumps(record["trajectory"])) is None
    return record


def start_failure(result: dict[str, Any]) -> str:
    """The message of a trial that failed in the environment's start."""
    info = result["exception_info"]
    assert "in start" in info["exception_traceback"], info["exception_traceback"]
    message: str = info["exception_message"]
    return message


@pytest.mark.parametrize(("agent", "reward"), [("oracle", 1.0), ("nop", 0.0)])
def test_harbor_run_earns_the_reward_of_its_agent(
    server: ServerProcess, dataset: Path, tmp_path: Path, agent: str, reward: float
) -> None:
    result = harbor_run(dataset, tmp_path / "jobs", agent, server.target)
    assert result.get("exception_info") is None, result["exception_info"]
    assert reward_of(result) == reward
    record = assert_valid_atif(result["trial_dir"])
    assert record["status"] == "CLOSED"


def test_an_unreachable_server_fails_the_trial_at_start_in_one_line(
    dataset: Path, tmp_path: Path
) -> None:
    result = harbor_run(dataset, tmp_path / "jobs", "nop", "127.0.0.1:1")
    message = result["exception_info"]["exception_message"]
    assert message == (
        "rollout-service at 127.0.0.1:1 is unreachable (no connection in 10s): "
        "is the server running?"
    )


def test_a_bad_token_fails_the_trial_at_start_in_one_line(
    guarded_server: ServerProcess, dataset: Path, tmp_path: Path
) -> None:
    target = guarded_server.target
    result = harbor_run(dataset, tmp_path / "jobs", "nop", target, "--ek", "token=not-the-token")
    assert start_failure(result) == (
        f"opening a session at {target}: UNAUTHENTICATED: invalid bearer token"
    )


def test_an_unknown_task_fails_the_trial_at_start_in_one_line(
    guarded_server: ServerProcess, dataset: Path, tmp_path: Path
) -> None:
    target = guarded_server.target
    options = ("--ek", f"token={TOKEN}", "--ek", "task_root=srv-tasks")
    result = harbor_run(dataset, tmp_path / "jobs", "nop", target, *options)
    assert start_failure(result) == (
        f"opening a session at {target}: INVALID_ARGUMENT: spec.harbor_task.path: "
        "no task directory 'srv-tasks/needs_root' under the task root 'srv-tasks'"
    )
