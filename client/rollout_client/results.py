"""Reading a Rollout as a person would: its status by name, its reward or None.

The generated messages give `rollout.status` as a number and `result.reward` as 0.0 when
it is unset (proto3 `optional`: only `HasField("reward")` tells). These say what they mean:

    print(status_name(rollout.status), reward_of(rollout))   # "SUCCEEDED 1.0", "FAILED None"
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rollout.v1 import rollout_pb2 as pb

__all__ = ["ExecOutcome", "reward_of", "session_status_name", "status_name"]


def status_name(status: pb.RolloutStatus) -> str:
    """The status's short name: "SUCCEEDED", "FAILED", "RUNNING", ..."""
    return pb.RolloutStatus.Name(status).removeprefix("ROLLOUT_STATUS_")


def session_status_name(status: pb.SessionStatus) -> str:
    """The session status's short name: "READY", "VERIFIED", "CLOSED", ..."""
    return pb.SessionStatus.Name(status).removeprefix("SESSION_STATUS_")


def reward_of(rollout: pb.Rollout) -> float | None:
    """The rollout's reward, or None when it has none (which differs from a reward of 0)."""
    return rollout.result.reward if rollout.result.HasField("reward") else None


@dataclass
class ExecOutcome:
    """One Exec call gathered: its streams' bytes and its `ExecResult` (the sync and asyncio
    clients' `exec` feed it the stream's items with `add`)."""

    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    result: pb.ExecResult | None = None

    def add(self, item: pb.ExecResponse) -> None:
        if item.HasField("output"):
            stream = self.stdout if item.output.stream == pb.EXEC_STREAM_STDOUT else self.stderr
            stream.extend(item.output.data)
        elif item.HasField("result"):
            self.result = item.result

    @property
    def exit_code(self) -> int:
        """The command's exit code; -1 when it was killed or the stream carried no result."""
        return self.result.exit_code if self.result is not None else -1

    @property
    def timed_out(self) -> bool:
        return self.result is not None and self.result.timed_out
