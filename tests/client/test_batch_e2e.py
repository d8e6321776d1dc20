"""`rollout batch` and `AsyncRolloutClient.batch` against a real server: a generated Harbor
dataset run by the oracle agent on the Debian base image (every third task's solution is
wrong, so rewards vary), groups of 4, Ctrl-C and --resume, JSONL input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout_client import AsyncRolloutClient, RolloutClient
from rollout_client.batch import BATCH_LABEL
from rollout_client.specfile import SpecOverrides

from testing.server_process import ServerProcess
from tests.client.conftest import cli_argv

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server"),
]
TASKS = 6
WRONG = {0, 3}  # tasks whose solution writes the wrong answer: reward 0
_TERMINAL = {
    pb.ROLLOUT_STATUS_SUCCEEDED,
    pb.ROLLOUT_STATUS_FAILED,
    pb.ROLLOUT_STATUS_TIMED_OUT,
    pb.ROLLOUT_STATUS_CANCELLED,
}


def make_dataset(root: Path, count: int, wrong: set[int]) -> Path:
    """`count` small Harbor tasks under `root`: write a number into answer.txt."""
    for i in range(count):
        task = root / f"task-{i:02d}"
        for part in ("environment", "solution", "tests"):
            (task / part).mkdir(parents=True)
        (task / "instruction.md").write_text(f"Write the number {i} into answer.txt.\n")
        (task / "task.toml").write_text("[verifier]\ntimeout_sec = 60.0\n")
        (task / "environment" / "Dockerfile").write_text("FROM rollout/base\n")
        answer = i + 1 if i in wrong else i
        # The pause leaves an interrupted batch something in flight to cancel.
        solve = f"#!/bin/bash\nsleep 1\necho {answer} > answer.txt\n"
        (task / "solution" / "solve.sh").write_text(solve)
        (task / "tests" / "test.sh").write_text(
            f'#!/bin/bash\n[ "$(cat answer.txt)" = "{i}" ] && r=1 || r=0\n'
            "echo $r > /logs/verifier/reward.txt\n"
        )
    return root


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = ServerProcess(tmp_path_factory.mktemp("batch-state"), env={"ROLLOUT_MAX_RUNNING": "8"})
    yield server.start()
    assert server.stop() == 0, server.text()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("dataset"), TASKS, WRONG)


def _command(target: str, *args: str) -> list[str]:
    agent = ["--agent", "oracle", "--image", "rollout/base"]
    return cli_argv("--target", target, "batch", *args, *agent)


def _lines(output: Path) -> list[dict[str, object]]:
    path = output / "results.jsonl"
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines()]


def _batch_rollouts(target: str, output: Path) -> list[pb.Rollout]:
    batch_id = json.loads((output / "batch.json").read_text())["batch_id"]
    with RolloutClient(target) as client:
        return list(client.list_all(labels={BATCH_LABEL: batch_id}, page_size=500))


def _running(target: str, output: Path) -> bool:
    return any(r.status == pb.ROLLOUT_STATUS_RUNNING for r in _batch_rollouts(target, output))


def test_a_dataset_runs_as_groups_with_a_summary(
    target: str, dataset: Path, tmp_path: Path
) -> None:
    output = tmp_path / "out"
    done = subprocess.run(
        _command(target, str(dataset), "--output", str(output), "--group-size", "4"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    lines = _lines(output)
    assert sorted((line["task"], line["member"]) for line in lines) == [
        (f"task-{i:02d}", m) for i in range(TASKS) for m in range(4)
    ]
    for line in lines:
        wrong = int(str(line["task"])[-2:]) in WRONG
        assert (line["status"], line["reward"]) == ("SUCCEEDED", 0.0 if wrong else 1.0)
        assert line["group"]
        assert line["timings_s"]
        assert (output / str(line["trajectory"])).is_file()
    summary = json.loads((output / "summary.json").read_text())
    assert summary["mean_reward"] == pytest.approx(4 / 6)
    assert summary["pass_at_k"] == {"1": pytest.approx(4 / 6), "4": pytest.approx(4 / 6)}
    assert summary["per_task"]["task-00"]["pass_at_k"] == {"1": 0.0, "4": 0.0}
    assert summary["infrastructure_failures"] == 0
    assert "pass@4" in done.stdout
    assert "task-05" in done.stdout
    assert len(_batch_rollouts(target, output)) == TASKS * 4


def test_ctrl_c_cancels_what_runs_and_resume_redoes_nothing_finished(
    target: str, dataset: Path, tmp_path: Path
) -> None:
    output = tmp_path / "out"
    args = (str(dataset), "--output", str(output), "--group-size", "2", "--n-concurrent", "2")
    first = subprocess.Popen(_command(target, *args), stderr=subprocess.PIPE, text=True)
    # Interrupted with a group done and the next one running on the server.
    while first.poll() is None and not (len(_lines(output)) >= 2 and _running(target, output)):
        time.sleep(0.05)
    first.send_signal(signal.SIGINT)
    _, stderr = first.communicate(timeout=120)
    assert first.returncode == 130, stderr
    assert "--resume" in stderr
    before = _lines(output)
    assert 2 <= len(before) < TASKS * 2
    rollouts = _batch_rollouts(target, output)
    assert [r.id for r in rollouts if r.status not in _TERMINAL] == []
    assert any(r.status == pb.ROLLOUT_STATUS_CANCELLED for r in rollouts)

    again = subprocess.run(
        _command(target, *args, "--resume"), capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stderr
    after = _lines(output)
    assert sorted((line["task"], line["member"]) for line in after) == [
        (f"task-{i:02d}", m) for i in range(TASKS) for m in range(2)
    ]
    # A task whose group finished before the interruption kept its lines and ran once: its
    # two rollouts and no more (a group cut midway ran again, whole).
    finished = {task for task, n in Counter(str(line["task"]) for line in before).items() if n == 2}
    assert finished
    assert [line for line in before if line["task"] in finished] == [
        line for line in after if line["task"] in finished
    ]
    per_task = Counter(r.spec.task_id for r in _batch_rollouts(target, output))
    for task in finished:
        assert per_task[task] == 2, per_task


async def test_the_async_api_yields_each_result_as_it_finishes(target: str, dataset: Path) -> None:
    labels = {"test": uuid.uuid4().hex}
    async with AsyncRolloutClient(target) as client:
        oracle = SpecOverrides(agent="oracle", image="rollout/base")
        results = client.batch(dataset, n_concurrent=2, labels=labels, overrides=oracle)
        first = await anext(results)
        await results.aclose()  # the rest is cancelled, and waited for
        assert first.status == "SUCCEEDED"
        rollouts = [r async for r in client.list_all(labels=labels)]
    assert first.rollout_id in {r.id for r in rollouts}
    assert [r.id for r in rollouts if r.status not in _TERMINAL] == []
    assert len(rollouts) < TASKS  # not run to the end


async def test_jsonl_specs_run_through_the_async_api(target: str, tmp_path: Path) -> None:
    specs = tmp_path / "specs.jsonl"
    spec = {
        "task": {"instruction": "x", "setup": ["echo hi > a.txt"], "verify": ["test -f b.txt"]},
        "agent": {"name": "command", "command": "cp a.txt b.txt"},
    }
    failing = {**spec, "task_id": "no-copy", "agent": {"name": "command", "command": "true"}}
    specs.write_text(json.dumps({**spec, "task_id": "copy"}) + "\n" + json.dumps(failing) + "\n")
    async with AsyncRolloutClient(target) as client:
        results = [r async for r in client.batch(specs, output_dir=tmp_path / "out")]
    assert sorted((r.task, r.reward) for r in results) == [("copy", 1.0), ("no-copy", 0.0)]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["mean_reward"] == 0.5


def test_a_group_whose_setup_fails_ends_in_the_results(target: str, tmp_path: Path) -> None:
    """The group fails once, SETUP, before any member starts: each of its members still has
    a line, FAILED/SETUP as a lone rollout would, and the task is in the summary."""
    task = {"instruction": "x", "setup": ["echo hi > a.txt"], "verify": ["test -f b.txt"]}
    spec = {"task": task, "agent": {"name": "command", "command": "cp a.txt b.txt"}}
    broken = {**spec, "task": {**task, "setup": ["exit 3"]}}
    specs = tmp_path / "specs.jsonl"
    lines = [{**spec, "task_id": "copy"}, {**broken, "task_id": "broken-setup"}]
    specs.write_text("".join(json.dumps(line) + "\n" for line in lines))
    output = tmp_path / "out"
    args = (str(specs), "--output", str(output), "--group-size", "2")
    done = subprocess.run(
        cli_argv("--target", target, "batch", *args), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    results = sorted(
        (line["task"], line["member"], line["status"], line["error_kind"], line["outcome"])
        for line in _lines(output)
    )
    assert results == [
        ("broken-setup", 0, "FAILED", "SETUP", "scored"),
        ("broken-setup", 1, "FAILED", "SETUP", "scored"),
        ("copy", 0, "SUCCEEDED", None, "scored"),
        ("copy", 1, "SUCCEEDED", None, "scored"),
    ]
    summary = json.loads((output / "summary.json").read_text())
    assert summary["per_task"]["broken-setup"]["rollouts"] == 2
    assert "broken-setup" in done.stdout


def test_a_server_that_builds_no_upload_stops_the_batch_at_once(
    target: str, tmp_path: Path
) -> None:
    """A default server refuses every uploaded task whose Dockerfile it has not built: the
    batch stops at the first, with one line saying what to set, rather than rejecting all."""
    dataset = make_dataset(tmp_path / "dataset", 3, set())
    for task in dataset.iterdir():
        dockerfile = task / "environment" / "Dockerfile"
        dockerfile.write_text(f"FROM rollout/base\nRUN echo {task.name} > /built\n")
    output = tmp_path / "out"
    oracle = ["--agent", "oracle"]
    done = subprocess.run(
        cli_argv("--target", target, "batch", str(dataset), "--output", str(output), *oracle),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("error:") == 1, done.stderr
    error = done.stderr.strip().splitlines()[-1].partition("error:")[2]
    assert "ROLLOUT_HARBOR_UPLOAD_BUILDS=true" in error
    assert "--image" in error
    assert "batch summary" not in done.stdout


def test_a_batch_the_server_rejects_entirely_fails_showing_why(target: str, tmp_path: Path) -> None:
    spec = {
        "task": {"instruction": "x", "verify": ["true"]},
        "agent": {"name": "command", "command": "true"},
        "sampling": {"temperature": 5},
    }
    specs = tmp_path / "specs.jsonl"
    specs.write_text(json.dumps({**spec, "task_id": "too-hot"}) + "\n")
    output = tmp_path / "out"
    done = subprocess.run(
        cli_argv("--target", target, "batch", str(specs), "--output", str(output)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stderr
    assert "rejected every task" in done.stderr
    assert "too-hot: 1 x INVALID_SPEC" in done.stdout
    assert "temperature" in done.stdout
    summary = json.loads((output / "summary.json").read_text())
    [reason] = summary["per_task"]["too-hot"]["errors"]
    assert reason.startswith("INVALID_SPEC: ")
    assert "temperature" in reason
