"""A session's status, read off its rollout record (live or stored)."""

from __future__ import annotations

from service.models import Phase, Rollout, RolloutStatus, SessionEnding, SessionStatus

__all__ = ["session_status"]

_ENDING = {
    SessionEnding.VERIFY: SessionStatus.VERIFYING,
    SessionEnding.CLOSE: SessionStatus.CLOSING,
    SessionEnding.EXPIRE: SessionStatus.CLOSING,
}


def session_status(rollout: Rollout) -> SessionStatus:
    """Where the session whose record `rollout` is stands."""
    record = rollout.result.session
    ending = None if record is None else record.ending
    if rollout.terminal:
        return _ended(rollout, ending)
    if ending is not None:
        return _ENDING[ending]
    if rollout.phase is Phase.AGENT and record is not None and record.ready_time is not None:
        return SessionStatus.READY
    if rollout.phase in (Phase.VERIFYING, Phase.COLLECTING, Phase.TEARDOWN):
        return SessionStatus.CLOSING  # the sandbox died under a command: failing
    return SessionStatus.OPENING


def _ended(rollout: Rollout, ending: SessionEnding | None) -> SessionStatus:
    if rollout.status is RolloutStatus.SUCCEEDED:
        return SessionStatus.VERIFIED
    if rollout.status is RolloutStatus.CANCELLED:
        return SessionStatus.EXPIRED if ending is SessionEnding.EXPIRE else SessionStatus.CLOSED
    return SessionStatus.FAILED
