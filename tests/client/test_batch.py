"""`rollout batch` without a server: inputs, pass@k, the output directory and resume rules,
and bad input named (the command fails before it connects)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout_client.batch import BatchResult, open_output, pass_at_k, read_input, summarize
from rollout_client.batch.results import is_retryable
from rollout_client.cli import app
from rollout_client.errors import SpecError
from rollout_client.specfile import SpecOverrides
from typer.testing import CliRunner

HARBOR_TASK = Path(__file__).resolve().parents[1] / "harbor" / "tasks" / "needs_root"


def _result(task: str, member: int, reward: float | None, outcome: str = "scored") -> BatchResult:
    return BatchResult(task=task, member=member, outcome=outcome, status="SUCCEEDED", reward=reward)


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    assert pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 4, 4) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # C(3,3)/C(5,3)
    assert pass_at_k(3, 3, 4) is None  # fewer samples than k


def test_the_summary_scores_only_task_outcomes() -> None:
    results = [
        _result("a", 0, 1.0),
        _result("a", 1, 0.0),
        _result("b", 0, None),  # scored without a reward: 0
        _result("b", 1, None, outcome="infrastructure"),
    ]
    summary = summarize(results, 2, infra_retries=3, wall_time_s=1.5)
    assert summary["mean_reward"] == pytest.approx(1 / 3)
    assert summary["per_task"]["a"]["pass_at_k"] == {"1": 0.5, "2": 1.0}
    assert summary["per_task"]["b"]["pass_at_k"] == {"1": 0.0, "2": None}
    assert summary["pass_at_k"] == {"1": 0.25, "2": 1.0}
    assert summary["infrastructure_failures"] == 1
    assert summary["infrastructure_retries"] == 3


def test_infrastructure_kinds_are_retried_and_tampering_is_scored() -> None:
    def failed(kind: str) -> pb.Rollout:
        return pb.Rollout(
            status=pb.ROLLOUT_STATUS_FAILED,
            result=pb.RolloutResult(error=pb.Error(kind=f"ERROR_KIND_{kind}")),
        )

    for kind in ("SANDBOX", "INTERNAL", "AGENT_INSTALL", "UPSTREAM_LLM", "POLICY_STALE"):
        assert is_retryable(failed(kind))
    for kind in ("TAMPERED", "AGENT", "SETUP", "VERIFIER", "AGENT_TIMEOUT"):
        assert not is_retryable(failed(kind))
    assert not is_retryable(pb.Rollout(status=pb.ROLLOUT_STATUS_SUCCEEDED))


def test_a_dataset_directory_gives_each_task_subdirectory(tmp_path: Path) -> None:
    for name in ("b-task", "a-task"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "instruction.md").write_text("do it\n")
    (tmp_path / "notes").mkdir()  # no instruction.md: not a task
    tasks = read_input(tmp_path, SpecOverrides(agent="oracle", image="rollout/base"))
    assert [t.task_id for t in tasks] == ["a-task", "b-task"]
    assert all(t.spec.harbor_task.archive and t.spec.agent.name == "oracle" for t in tasks)
    assert tasks[0].spec.task_id == "a-task"
    assert [t.task_id for t in read_input(HARBOR_TASK)] == ["needs_root"]


def test_bad_inputs_are_named(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file or directory"):
        read_input(tmp_path / "missing")
    with pytest.raises(SpecError, match="no Harbor task in it"):
        read_input(tmp_path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(SpecError, match="no spec in it"):
        read_input(empty)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": {"instruction": "x"}}\n{"task": \n')
    with pytest.raises(SpecError, match=r"bad\.jsonl line 2: not JSON"):
        read_input(bad)
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text('{"task": {"instruction": "x"}}\n\n{"tusk": 1}\n')
    with pytest.raises(SpecError, match=r"line 3: .*tusk"):
        read_input(unknown)
    twice = tmp_path / "twice.jsonl"
    twice.write_text('{"task_id": "t"}\n{"task_id": "t"}\n')
    with pytest.raises(SpecError, match="repeated: t"):
        read_input(twice)


def test_jsonl_specs_take_the_flags_over_them(tmp_path: Path) -> None:
    specs = tmp_path / "specs.jsonl"
    first = '{"task_id": "copy", "task": {"instruction": "x"}}'
    specs.write_text(first + '\n{"spec": {"task": {"instruction": "y"}}}\n')
    tasks = read_input(specs, SpecOverrides(agent="command", agent_command="true"))
    assert [t.task_id for t in tasks] == ["copy", "line-2"]
    assert {t.spec.agent.command for t in tasks} == {"true"}


def test_resume_keeps_finished_tasks_and_drops_a_cut_group_and_a_torn_line(
    tmp_path: Path,
) -> None:
    output = open_output(tmp_path / "out", 2, resume=False)
    for result in (_result("a", 0, 1.0), _result("b", 0, 0.0), _result("a", 1, 0.0)):
        output.append(result)
    results = tmp_path / "out" / "results.jsonl"
    with results.open("a") as out:
        out.write('{"task": "b", "mem')  # killed mid-write
    resumed = open_output(tmp_path / "out", 2, resume=True)
    assert resumed.batch_id == output.batch_id
    assert resumed.done_tasks() == {"a"}
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(line["task"], line["member"]) for line in lines] == [("a", 0), ("a", 1)]


def test_an_output_directory_is_not_reused_by_mistake(tmp_path: Path) -> None:
    open_output(tmp_path, 4, resume=False)
    with pytest.raises(SpecError, match="pass --resume"):
        open_output(tmp_path, 4, resume=False)
    with pytest.raises(SpecError, match=r"--group-size 2: the batch in .* ran with 4"):
        open_output(tmp_path, 2, resume=True)
    with pytest.raises(SpecError, match=r"--resume: .*batch\.json is missing"):
        open_output(tmp_path / "other", 4, resume=True)


def test_the_command_names_bad_input_and_refuses_task_flags(
    tmp_path: Path, closed_target: str
) -> None:
    runner = CliRunner()
    base = ["batch", "--target", closed_target, "--output", str(tmp_path / "out")]
    missing = runner.invoke(app, [*base, str(tmp_path / "nowhere")])
    assert missing.exit_code == 1
    assert "nowhere: no such file or directory" in missing.output
    empty = runner.invoke(app, [*base, str(tmp_path)])
    assert empty.exit_code == 1
    assert "no Harbor task in it" in empty.output
    assert not (tmp_path / "out").exists()  # nothing made for a batch that cannot run
    flagged = runner.invoke(app, [*base, str(tmp_path), "--instruction", "x"])
    assert flagged.exit_code == 2
    assert "--instruction" in flagged.output
