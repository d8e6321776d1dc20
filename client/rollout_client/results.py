"""Reading a Rollout as a person would: its status by name, its reward or None.

The generated messages give `rollout.status` as a number and `result.reward` as 0.0 when
it is unset (proto3 `optional`: only `HasField("reward")` tells). These say what they mean:

    print(status_name(rollout.status), reward_of(rollout))   # "SUCCEEDED 1.0", "FAILED None"
"""

from __future__ import annotations

from rollout.v1 import rollout_pb2 as pb

__all__ = ["reward_of", "status_name"]


def status_name(status: pb.RolloutStatus) -> str:
    """The status's short name: "SUCCEEDED", "FAILED", "RUNNING", ..."""
    return pb.RolloutStatus.Name(status).removeprefix("ROLLOUT_STATUS_")


def reward_of(rollout: pb.Rollout) -> float | None:
    """The rollout's reward, or None when it has none (which differs from a reward of 0)."""
    return rollout.result.reward if rollout.result.HasField("reward") else None
