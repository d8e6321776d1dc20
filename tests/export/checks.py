"""Checks every export test makes on a finished rollout: the ATIF file is valid under Harbor's
own trajectory models (`harbor.models.trajectories.Trajectory`, run in .harbor-venv: Harbor
needs Python 3.12), and its ids and logprobs, like the training records', are exactly what the
scripted upstream sent."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout_client.export.atif import ATIF_VERSION, to_atif
from rollout_client.export.command import ExportFormat, render
from rollout_client.export.train import to_train_records

from testing.fakes.llm_replies import SentReply

__all__ = [
    "HARBOR_PYTHON",
    "agent_steps",
    "assert_exact_tokens",
    "assert_train_records",
    "harbor_validation_error",
    "require_harbor",
    "valid_atif",
]

HARBOR_PYTHON = Path(__file__).parent.parent.parent / ".harbor-venv" / "bin" / "python"
"""Harbor's venv (`make harbor-venv`), where its released package's models are."""


def require_harbor() -> None:
    """Skip when Harbor's venv is missing; under CI fail instead, so that a run that could not
    test against Harbor's own package never passes as though it had."""
    if HARBOR_PYTHON.exists():
        return
    message = f"no {HARBOR_PYTHON.parent.parent}: Harbor needs Python 3.12+ (make harbor-venv)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


_VALIDATE = (
    "import sys\n"
    "from pydantic import ValidationError\n"
    "from harbor.models.trajectories import Trajectory\n"
    "try:\n"
    "    Trajectory.model_validate_json(sys.stdin.read())\n"
    "except ValidationError as exc:\n"
    "    sys.exit(str(exc))\n"
)


def harbor_validation_error(text: str) -> str | None:
    """Why Harbor's own `Trajectory` model refuses the ATIF document `text`, or None when it
    accepts it."""
    require_harbor()
    done = subprocess.run(
        [str(HARBOR_PYTHON), "-c", _VALIDATE],
        input=text,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.stderr.strip() if done.returncode else None


def valid_atif(rollout: pb.Rollout) -> dict[str, Any]:
    """The ATIF export, written as `rollout export` writes it and valid under Harbor's models."""
    text = render(rollout, ExportFormat.ATIF)
    assert harbor_validation_error(text) is None
    document: dict[str, Any] = json.loads(text)
    assert document == to_atif(rollout)
    assert document["schema_version"] == ATIF_VERSION == "ATIF-v1.4"
    return document


def agent_steps(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for step in document["steps"] if step["source"] == "agent"]


def assert_exact_tokens(metrics: dict[str, Any], sent: SentReply) -> None:
    assert metrics["prompt_token_ids"] == sent.prompt_token_ids
    assert metrics["completion_token_ids"] == sent.completion_token_ids
    assert metrics["logprobs"] == sent.logprobs  # exact: the decimals the upstream sent
    assert metrics["completion_tokens"] == len(sent.completion_token_ids)


def assert_train_records(rollout: pb.Rollout, sent: list[SentReply]) -> None:
    """One record per turn, `sent` being what each turn's call got, in turn order."""
    records = to_train_records(rollout)
    assert [r["turn_index"] for r in records] == list(range(len(sent)))
    for record, reply, turn in zip(records, sent, rollout.result.turns, strict=True):
        prompt, completion = reply.prompt_token_ids, reply.completion_token_ids
        assert record["prompt_token_ids"] == prompt
        assert record["completion_token_ids"] == completion
        assert record["logprobs"] == reply.logprobs
        assert record["trainable"] is turn.trainable
        assert record["loss_mask"] == [0] * len(prompt) + [int(turn.trainable)] * len(completion)
        assert record["rollout_id"] == rollout.id
        has_reward = rollout.result.HasField("reward")
        assert record["reward"] == (rollout.result.reward if has_reward else None)
    lines = render(rollout, ExportFormat.TRAIN).splitlines()
    assert [json.loads(line) for line in lines] == records
