"""What the terminal environment needs of a session: four calls, nothing more.

    open(spec)                 -> Opened(session_id, instruction)   OpenSession
    exec(id, command, timeout) -> Executed(stdout, stderr, ...)     Exec
    verify(id)                 -> Verified(reward, ...)             VerifySession
    close(id)                                                       CloseSession

`RolloutSessions` is its binding: the sessions RPCs named on the right, through
rollout_client's blocking client. Synchronous on purpose: OpenEnv's server runs a session's
sync calls on a thread of that session's own, and closes an environment from a thread, where
an asyncio channel cannot go.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Protocol

from rollout.v1 import rollout_pb2 as pb
from rollout_client import NotFoundError, RolloutClient, session_status_name

__all__ = ["Executed", "Opened", "RolloutSessions", "SessionFailedError", "Sessions", "Verified"]


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


class SessionFailedError(RuntimeError):
    """A session that did not open (its setup failed, say): `"<KIND>: <message>"`."""


class RolloutSessions:
    """`Sessions` over one rollout-service's sessions RPCs. One blocking client (a channel is
    safe across threads) serves every environment of the front door."""

    def __init__(self, client: RolloutClient) -> None:
        self._client = client

    def open(self, spec: pb.RolloutSpec) -> Opened:
        (session,) = self._client.open_session(spec)
        if session.status != pb.SESSION_STATUS_READY:
            raise SessionFailedError(
                f"the session did not open ({session_status_name(session.status)}): "
                + _error_of(session.result)
            )
        return Opened(session_id=session.id, instruction=session.spec.task.instruction)

    def exec(self, session_id: str, command: str, timeout_s: float | None) -> Executed:
        ran = self._client.exec(session_id, command, timeout_s=timeout_s)
        duration = ran.result.duration.ToNanoseconds() / 1e9 if ran.result is not None else 0.0
        return Executed(
            exit_code=ran.exit_code,
            stdout=ran.stdout.decode(errors="replace"),
            stderr=ran.stderr.decode(errors="replace"),
            timed_out=ran.timed_out,
            duration_s=duration,
        )

    def verify(self, session_id: str) -> Verified:
        result = self._client.verify_session(session_id).result
        failed = result.HasField("error") and result.error.kind != pb.ERROR_KIND_UNSPECIFIED
        return Verified(
            reward=result.reward if result.HasField("reward") else None,
            error_kind=pb.ErrorKind.Name(result.error.kind).removeprefix("ERROR_KIND_")
            if failed
            else None,
            error=_error_of(result) if failed else None,
            verify_results=[
                Executed(
                    exit_code=command.exit_code,
                    stdout=command.stdout,
                    stderr=command.stderr,
                    timed_out=command.timed_out,
                    duration_s=command.duration.ToNanoseconds() / 1e9,
                )
                for command in result.verify_results
            ],
        )

    def close(self, session_id: str) -> None:
        # Gone already (reaped, or another tenant's id): nothing is left to kill.
        with contextlib.suppress(NotFoundError):
            self._client.close_session(session_id)


def _error_of(result: pb.RolloutResult) -> str:
    """`"<KIND>: <message>"`, as opencode_env's results say a rollout's error."""
    kind = pb.ErrorKind.Name(result.error.kind).removeprefix("ERROR_KIND_")
    return f"{kind}: {result.error.message}"
