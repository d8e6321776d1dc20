"""What the terminal environment needs of a session: four calls, nothing more.

    open(spec)                 -> Opened(session_id, instruction)   OpenSession
    exec(id, command, timeout) -> Executed(stdout, stderr, ...)     Exec
    verify(id)                 -> Verified(reward, ...)             VerifySession
    close(id)                                                       CloseSession

Its implementation calls the sessions RPCs named on the right, through rollout_client; they
are not on this branch yet, so neither is that binding (docs/openenv.md#the-terminal-environment).
Synchronous on purpose: OpenEnv's server runs a session's sync calls on a thread of that
session's own, and closes an environment from a thread, where an asyncio channel cannot go.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from rollout.v1 import rollout_pb2 as pb

__all__ = ["Executed", "Opened", "Sessions", "Verified"]


@dataclass(frozen=True)
class Opened:
    """A session made and set up, ready for its first command."""

    session_id: str
    instruction: str


@dataclass(frozen=True)
class Executed:
    """One command's outcome."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    duration_s: float = 0.0


@dataclass(frozen=True)
class Verified:
    """The verifier's verdict on the session, by the task's reward rules."""

    reward: float | None
    error_kind: str | None = None
    error: str | None = None
    verify_results: list[Executed] = field(default_factory=list)


class Sessions(Protocol):
    """Sessions of one rollout-service, each a sandbox kept between calls."""

    def open(self, spec: pb.RolloutSpec) -> Opened:
        """Make a sandbox for `spec`'s task (task or harbor_task, sandbox), run its setup."""
        ...

    def exec(self, session_id: str, command: str, timeout_s: float | None) -> Executed:
        """Run `command` with bash in the session's workdir."""
        ...

    def verify(self, session_id: str) -> Verified:
        """Verify the session's work; the session ends with it."""
        ...

    def close(self, session_id: str) -> None:
        """End the session and kill its sandbox (a session already gone is no error)."""
        ...
