"""The trainer's hold on model calls: policy versions and pauses, by selector.

SetPolicyVersion, PauseModelCalls and ResumeModelCalls name rollouts by a `CallSelector`:
an endpoint (base URL, and a model or any) or labels. `ModelCalls` keeps each live proxy
route's gate (`proxy.capture.gate`) with what a selector matches on, and the selectors'
standing versions and pauses: a rollout whose route opens later under a matching selector
starts at its version, and paused.

    call                 live routes that match            later routes that match
    set_version          gate.version = v                  start at v (the newest rule)
    pause                held; in flight drained/aborted   start held, until the resume
    resume (same sel.)   released (unless another holds)   no longer held
    pause_max_s later    as a resume: the pause lifts itself (a trainer gone mid-sync
                         cannot hold the calls, and their rollouts' slots, for ever)

The standing rules are each tenant's, bounded, and freed once no longer in force
(`engine.call_rules`).

Tenancy: a selector carries its caller's tenant. A tenant reaches its own rollouts only, and
its standing versions and pauses apply to its own later rollouts; an admin (None) reaches
every rollout. Routes of the proxy inside a remote sandbox have no gate here: these calls do
not reach them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from service.engine.call_rules import CallRules, CallSelector
from service.errors import FieldViolation, SpecError
from service.models import EventPayload, Notice
from service.proxy import CallGate

__all__ = ["CallSelector", "DrainReport", "ModelCalls", "Publish", "RouteEntry"]

Publish = Callable[[EventPayload], None]
"""Publishes on one rollout's event log."""

PAUSED_TOPIC = "model_calls.paused"
RESUMED_TOPIC = "model_calls.resumed"


@dataclass(frozen=True)
class RouteEntry:
    """A live route's gate and what selectors match it on."""

    rollout_id: str
    tenant: str
    base_url: str
    model: str
    labels: Mapping[str, str]
    gate: CallGate
    publish: Publish
    """Takes the rollout's pause and resume notices."""


@dataclass(frozen=True)
class DrainReport:
    """What a pause found: the rollouts it holds, and their calls then in flight."""

    rollouts: int
    finished: int
    aborted: int


class ModelCalls:
    """Every live route's gate, and the standing versions and pauses (`engine.call_rules`)."""

    def __init__(self, *, rules_per_tenant: int, pause_max_s: float) -> None:
        self._entries: dict[int, RouteEntry] = {}
        self._rules = CallRules(per_tenant=rules_per_tenant, in_force=self._reaches_any)
        self._pause_max_s = pause_max_s

    def rules(self, tenant: str | None) -> int:
        """The tenant's standing versions and pauses now."""
        return self._rules.count(tenant)

    def register(self, entry: RouteEntry) -> None:
        """Start tracking a route: at its selectors' standing version, and held if paused."""
        version = self._rules.version_for(entry)
        if version is not None:
            entry.gate.set_version(version)
        self._entries[id(entry.gate)] = entry
        for selector in self._rules.pauses_for(entry):
            self._hold(entry, selector)

    def unregister(self, gate: CallGate) -> None:
        self._entries.pop(id(gate), None)

    def set_version(self, selector: CallSelector, version: int) -> int:
        """Set the policy version of the matching routes (and later ones); how many."""
        matched = list(self._matching(selector))
        current = max((e.gate.version or 0 for e in matched), default=0)
        if version < current:
            problem = f"{version} is below {current}, which a selected rollout already runs"
            raise SpecError([FieldViolation("version", f"{problem}: versions only move forward")])
        self._rules.set_version(selector, version)
        for entry in matched:
            entry.gate.set_version(version)
        return len(matched)

    async def pause(self, selector: CallSelector, *, abort_in_flight: bool) -> DrainReport:
        """Hold the matching routes' calls (and later routes'), then wait until none of
        theirs is in flight; with `abort_in_flight`, abort those not yet answering first.
        The pause lifts itself after `pause_max_s` if not resumed before."""
        expired = f"pause expired after {self._pause_max_s:g}s"
        self._rules.add_pause(selector, lambda: self._lift(selector, expired), self._pause_max_s)
        matched = list(self._matching(selector))
        for entry in matched:
            self._hold(entry, selector)
        in_flight = sum(entry.gate.in_flight for entry in matched)
        aborted = sum(entry.gate.abort_unanswered() for entry in matched) if abort_in_flight else 0
        await asyncio.gather(*(entry.gate.drained() for entry in matched))
        return DrainReport(len(matched), in_flight - aborted, aborted)

    def resume(self, selector: CallSelector) -> tuple[int, int]:
        """Lift the pause made with `selector`: how many routes it held, and how many calls
        waiting at them went on."""
        return self._lift(selector, "resumed")

    def _lift(self, selector: CallSelector, why: str) -> tuple[int, int]:
        self._rules.drop_pause(selector)
        rollouts = released = 0
        for entry in self._matching(selector):
            rollouts += entry.gate.held_by(selector)
            waiting = entry.gate.waiting
            if entry.gate.release(selector):
                released += waiting
                message = f"{why} ({selector.describe()})"
                entry.publish(Notice(topic=RESUMED_TOPIC, message=message))
        return rollouts, released

    def _hold(self, entry: RouteEntry, selector: CallSelector) -> None:
        if entry.gate.hold(selector):
            entry.publish(Notice(topic=PAUSED_TOPIC, message=f"paused ({selector.describe()})"))

    def _matching(self, selector: CallSelector) -> Iterator[RouteEntry]:
        return (entry for entry in list(self._entries.values()) if selector.matches(entry))

    def _reaches_any(self, selector: CallSelector) -> bool:
        return any(selector.matches(entry) for entry in self._entries.values())
