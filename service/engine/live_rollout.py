"""A rollout this server runs, as the manager holds it, and how its end is recorded
whatever ended its work (the run's own record, a cancel before it ran, a crash)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

from service.models import ErrorKind, Phase, Rollout, RolloutError, RolloutStatus

__all__ = ["LiveRollout", "record_ending"]

log = logging.getLogger(__name__)


@dataclass
class LiveRollout:
    """A rollout this server runs: its work, and the task that settles it whatever happens."""

    rollout: Rollout
    work: asyncio.Task[Rollout] | None = None
    """The queue wait and the run: the only task a cancel ever touches."""
    settled: asyncio.Task[None] | None = None
    """Records, publishes and saves how `work` ended, then frees the rollout's place."""
    done: asyncio.Event = field(default_factory=asyncio.Event)
    cancel_reason: str = ""
    spec_bytes: int = 0
    """What its spec's files weigh: freed when it ends (`HeapTrimmer`)."""
    fenced: bool = False
    """Another server took the rollout over (this one lost its lease): the run is stopped and
    nothing of it is published or saved any more, so nothing overwrites the takeover's."""


def record_ending(rollout: Rollout, work: asyncio.Task[Rollout], cancel_reason: str) -> None:
    """Make the rollout terminal from how its work ended (the run itself records most)."""
    if work.cancelled():
        rollout.status = RolloutStatus.CANCELLED
    elif work.exception() is not None:
        log.error("rollout %s crashed", rollout.id, exc_info=work.exception())
        rollout.status = RolloutStatus.FAILED
        rollout.result.error = RolloutError(kind=ErrorKind.INTERNAL, message="the run crashed")
    if rollout.status is RolloutStatus.CANCELLED:
        message = f"cancelled: {cancel_reason}" if cancel_reason else "cancelled"
        rollout.result.error = RolloutError(kind=ErrorKind.CANCELLED, message=message)
    rollout.phase = Phase.DONE
    rollout.finish_time = rollout.finish_time or datetime.now(UTC)
