"""Checks every export test makes on a finished rollout: the ATIF file is valid against the
spec's models (atif_spec.py), and its ids and logprobs, like the training records', are
exactly what the scripted upstream sent."""

from __future__ import annotations

import json
from typing import Any

from rollout.v1 import rollout_pb2 as pb
from rollout_client.export.atif import ATIF_VERSION, to_atif
from rollout_client.export.command import ExportFormat, render
from rollout_client.export.train import to_train_records

from testing.fakes.llm_replies import SentReply
from tests.export.atif_spec import Trajectory

__all__ = ["agent_steps", "assert_exact_tokens", "assert_train_records", "valid_atif"]


def valid_atif(rollout: pb.Rollout) -> dict[str, Any]:
    """The ATIF export, written as `rollout export` writes it and validated against the spec."""
    text = render(rollout, ExportFormat.ATIF)
    Trajectory.model_validate_json(text)
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
