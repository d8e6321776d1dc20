"""A session's bookkeeping, kept on its rollout record (`RolloutResult.session`).

A session is a rollout whose agent is its caller (`engine.sessions`): its record is stored,
listed and watched as a rollout's, and this is what a session adds to it.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel

__all__ = ["SESSION_AGENT", "SESSION_LABEL", "SessionEnding", "SessionRecord", "SessionStatus"]

SESSION_AGENT = "session"
"""The agent name of a session's rollout record."""
SESSION_LABEL = "rollout.session"
"""A label every session's record carries (ListSessions filters on it); reserved: a spec may
not set it."""


class SessionEnding(StrEnum):
    """What ended, or is ending, a session."""

    VERIFY = "verify"
    CLOSE = "close"
    """CloseSession, or the server shutting down."""
    EXPIRE = "expire"
    """Its idle timeout or its lifetime."""


class SessionStatus(StrEnum):
    """Where a session stands (`engine.sessions.status` reads it off its rollout)."""

    OPENING = "opening"
    READY = "ready"
    VERIFYING = "verifying"
    CLOSING = "closing"
    VERIFIED = "verified"
    CLOSED = "closed"
    EXPIRED = "expired"
    FAILED = "failed"


class SessionRecord(BaseModel):
    """What a session adds to its rollout record."""

    idle_timeout_s: float
    max_lifetime_s: float
    copy_index: int = 0
    """Its index among the copies opened together."""
    commands: int = 0
    """Commands run with Exec."""
    ready_time: datetime | None = None
    last_activity_time: datetime | None = None
    model_base_url: str = ""
    """The base URL an agent inside reaches the model at; "" without an endpoint."""
    ending: SessionEnding | None = None
