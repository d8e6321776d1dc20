"""Builders for the RolloutSpec messages the end-to-end tests send."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from rollout.v1 import rollout_pb2 as pb

__all__ = ["command_spec", "terminal"]


def command_spec(
    command: str = "true",
    *,
    setup: tuple[str, ...] = (),
    verify: tuple[str, ...] = (),
    **fields: Any,
) -> pb.RolloutSpec:
    """A spec for the `command` agent; extra fields in proto JSON shape are merged in."""
    document: dict[str, Any] = {
        "task": {"instruction": "do the task", "setup": list(setup), "verify": list(verify)},
        "agent": {"name": "command", "command": command},
    }
    for key, value in fields.items():
        if isinstance(value, dict) and isinstance(document.get(key), dict):
            document[key] = {**document[key], **value}
        else:
            document[key] = value
    return json_format.ParseDict(document, pb.RolloutSpec())


TERMINAL = {
    pb.ROLLOUT_STATUS_SUCCEEDED,
    pb.ROLLOUT_STATUS_FAILED,
    pb.ROLLOUT_STATUS_CANCELLED,
    pb.ROLLOUT_STATUS_TIMED_OUT,
}


def terminal(rollout: pb.Rollout) -> bool:
    return rollout.status in TERMINAL
