"""Harbor's own released CLI (`harbor run`, in .harbor-venv: `make harbor-venv`) running its
agents in this service's sessions through `rollout_client.harbor_env`, against a real server:
the oracle earns 1, the no-op agent 0; the session's ATIF export is valid under Harbor's own
trajectory models; a server that is unreachable fails the trial at start with one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testing.server_process import ServerProcess

ROOT = Path(__file__).parent.parent.parent
HARBOR_PYTHON = ROOT / ".harbor-venv" / "bin" / "python"
TASKS = Path(__file__).parent / "tasks"
ENVIRONMENT = "rollout_client.harbor_env:RolloutEnvironment"

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
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("harbor-dataset")
    shutil.copytree(TASKS / "needs_root", root / "needs_root")
    return root


def harbor_run(dataset: Path, jobs: Path, agent: str, target: str) -> dict[str, Any]:
    """`harbor run` of the dataset; its one trial's result, and the session's record."""
    command = [
        str(HARBOR_PYTHON), "-m", "harbor.cli.main", "run", "-p", str(dataset), "-a", agent,
        "-o", str(jobs), "-n", "1", "--env", ENVIRONMENT, "--ek", f"target={target}",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
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
    """The session's ATIF export, validated by Harbor's own `Trajectory` model."""
    record: dict[str, Any] = json.loads((trial_dir / "rollout-session.json").read_text())
    check = (
        "import json, sys; from harbor.models.trajectories import Trajectory; "
        "Trajectory.model_validate(json.load(sys.stdin))"
    )
    done = subprocess.run(
        [str(HARBOR_PYTHON), "-c", check],
        input=json.dumps(record["trajectory"]),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return record


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
