"""The `RolloutStore` protocol: durable rollouts and their event logs."""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import NamedTuple, Protocol

from service.models import Rollout, RolloutEvent, RolloutStatus

__all__ = [
    "RESTARTED",
    "FencedError",
    "Holder",
    "Interrupted",
    "LeaseLostHandler",
    "RolloutPage",
    "RolloutStore",
    "TakeRollout",
]

RolloutPage = tuple[list[Rollout], str]
"""A page of rollouts and the token of the next page ("" on the last)."""

TakeRollout = Callable[[Rollout], bool]
"""Asked for each rollout of a page in order: whether it joins the page. The first refusal
ends the page there (the next page starts with the refused rollout), so it must take the
first rollout it is offered or the page cannot advance."""

LeaseLostHandler = Callable[[], int]
"""Stops every run this server started under the lease it lost (without a write); returns how
many it stopped."""


RESTARTED = "interrupted by restart"
"""Why a rollout that an earlier run of this same server left unfinished ended."""


class Interrupted(NamedTuple):
    """An unfinished rollout no live server runs, now this server's to end, and why it ended
    (its error message: RESTARTED, or which server stopped and which one ended it)."""

    rollout: Rollout
    reason: str


class Holder(NamedTuple):
    """The live server that runs a rollout another server was asked about."""

    instance: str
    """Its ROLLOUT_INSTANCE_ID."""
    address: str
    """Where its API is reached ('': it named none)."""


class FencedError(Exception):
    """A write refused because the rows are no longer this server's: another server sharing
    the store took them over (this one missed its heartbeats for a whole lease)."""

    def __init__(self, ids: Sequence[str]) -> None:
        super().__init__(f"taken over by another server: {', '.join(ids)}")
        self.ids = frozenset(ids)


class RolloutStore(Protocol):
    """Persistence of rollouts (spec already redacted) and their ordered events."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def insert(self, rollout: Rollout) -> Rollout:
        """Insert a new rollout; if its tenant already used its spec's request_id, return that
        rollout instead."""
        ...

    async def save(self, rollout: Rollout) -> None:
        """Overwrite an existing rollout's status, phase, result and times (FencedError if
        another server took it over)."""
        ...

    async def get(self, rollout_id: str) -> Rollout | None: ...

    async def find_by_request_id(self, request_id: str, *, tenant: str = "") -> Rollout | None:
        """The rollout of `tenant` whose spec carries this (non-empty) request_id, if any."""
        ...

    async def list(
        self,
        *,
        labels: Mapping[str, str],
        statuses: Sequence[RolloutStatus],
        page_size: int,
        page_token: str,
        tenant: str | None = None,
        slim: bool = False,
        take: TakeRollout | None = None,
    ) -> RolloutPage:
        """Up to `page_size` rollouts newest first, of `tenant` or (None) of every tenant, as
        many as `take` accepts.

        `slim` reads each rollout as `Rollout.slim()` would make it, without loading its bulk.
        Raises SpecError(field "page_token") on a bad token.
        """
        ...

    async def non_terminal(self) -> builtins.list[Interrupted]:
        """Rollouts not in a terminal status that no live server runs, oldest first, with why
        (used at startup, and on a shared store every while, to fail interrupted ones)."""
        ...

    async def append_events(self, events: Sequence[RolloutEvent]) -> None:
        """Append events (seq already assigned, increasing per rollout); none of them, and
        FencedError naming those rollouts, if another server took any of them over."""
        ...

    async def events(
        self, rollout_id: str, *, after_seq: int, limit: int
    ) -> builtins.list[RolloutEvent]:
        """Up to `limit` events of one rollout with seq > after_seq, in order."""
        ...

    def follow_events(self, rollout_id: str, *, after_seq: int) -> AsyncIterator[RolloutEvent]:
        """Events of a rollout that another server sharing this store runs, with seq >
        after_seq, in order, as that server stores them, until the final one. A store that
        tells no server of another's writes yields nothing."""
        ...

    async def request_cancel(self, rollout_id: str, reason: str) -> bool:
        """Ask the live server that runs this rollout (another one sharing this store) to
        cancel it; False if none does (a store no other server shares: always)."""
        ...

    def on_cancel_request(self, handler: Callable[[str, str], None]) -> None:
        """Have `handler(rollout_id, reason)` cancel what other servers ask this one to."""
        ...

    async def advertise(self, address: str) -> None:
        """Tell the servers sharing this store where this one's API is reached (a store no
        other server shares: nothing)."""
        ...

    async def holder(self, rollout_id: str) -> Holder | None:
        """The live server, another one sharing this store, that runs this unfinished
        rollout; None if none does (a store no other server shares: always)."""
        ...

    def on_lease_lost(self, handler: LeaseLostHandler) -> None:
        """Have `handler` stop this server's runs when its lease is lost (a store no other
        server shares holds no lease: never)."""
        ...

    def follow_others(self) -> AsyncIterator[RolloutEvent]:
        """Events other servers sharing this store store from now on, in order per rollout,
        until cancelled (label-wide watchers); a store no other server shares yields none."""
        ...
