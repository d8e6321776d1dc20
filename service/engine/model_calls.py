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

Tenancy: a selector carries its caller's tenant. A tenant reaches its own rollouts only, and
its standing versions and pauses apply to its own later rollouts; an admin (None) reaches
every rollout. Routes of the proxy inside a remote sandbox have no gate here: these calls do
not reach them.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from service.errors import FieldViolation, SpecError
from service.models import EventPayload, Notice
from service.proxy.capture.gate import CallGate
from service.proxy.endpoints import normalized_base_url

__all__ = ["CallSelector", "DrainReport", "ModelCalls", "Publish", "RouteEntry"]

Publish = Callable[[EventPayload], None]
"""Publishes on one rollout's event log."""

PAUSED_TOPIC = "model_calls.paused"
RESUMED_TOPIC = "model_calls.resumed"
_MAX_RULES = 10_000
"""Standing versions and pauses kept at most (distinct selectors), so callers cannot grow
the server's memory without bound."""


@dataclass(frozen=True)
class CallSelector:
    """Rollouts by endpoint (`base_url`, and `model` or "" for any) or by `labels`."""

    tenant: str | None
    base_url: str = ""
    model: str = ""
    labels: tuple[tuple[str, str], ...] = ()

    @classmethod
    def endpoint(cls, tenant: str | None, base_url: str, model: str) -> CallSelector:
        normalized = normalized_base_url(base_url) if base_url else None
        if normalized is None:
            problem = "must be an http(s) URL" if base_url else "required"
            raise SpecError([FieldViolation("selector.endpoint.base_url", problem)])
        return cls(tenant, base_url=normalized, model=model)

    @classmethod
    def by_labels(cls, tenant: str | None, labels: Mapping[str, str]) -> CallSelector:
        if not labels:
            raise SpecError([FieldViolation("selector.labels.labels", "at least one label")])
        return cls(tenant, labels=tuple(sorted(labels.items())))

    def matches(self, entry: RouteEntry) -> bool:
        if self.tenant is not None and entry.tenant != self.tenant:
            return False
        if self.labels:
            return all(entry.labels.get(key) == value for key, value in self.labels)
        return entry.base_url == self.base_url and self.model in ("", entry.model)

    def describe(self) -> str:
        if self.labels:
            return "labels " + ", ".join(f"{key}={value}" for key, value in self.labels)
        return f"endpoint {self.base_url}" + (f" model {self.model}" if self.model else "")


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
    """Every live route's gate, and the standing versions and pauses."""

    def __init__(self) -> None:
        self._entries: dict[int, RouteEntry] = {}
        self._versions: dict[CallSelector, tuple[int, int]] = {}
        """Standing versions: selector -> (order set, version); the newest matching wins."""
        self._pauses: set[CallSelector] = set()
        self._order = itertools.count()

    def register(self, entry: RouteEntry) -> None:
        """Start tracking a route: at its selectors' standing version, and held if paused."""
        rules = [rule for selector, rule in self._versions.items() if selector.matches(entry)]
        if rules:
            entry.gate.set_version(max(rules)[1])
        self._entries[id(entry.gate)] = entry
        for selector in self._pauses:
            if selector.matches(entry):
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
        self._remember(selector)
        self._versions[selector] = (next(self._order), version)
        for entry in matched:
            entry.gate.set_version(version)
        return len(matched)

    async def pause(self, selector: CallSelector, *, abort_in_flight: bool) -> DrainReport:
        """Hold the matching routes' calls (and later routes'), then wait until none of
        theirs is in flight; with `abort_in_flight`, abort those not yet answering first."""
        self._remember(selector)
        self._pauses.add(selector)
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
        self._pauses.discard(selector)
        rollouts = released = 0
        for entry in self._matching(selector):
            rollouts += entry.gate.held_by(selector)
            waiting = entry.gate.waiting
            if entry.gate.release(selector):
                released += waiting
                message = f"resumed ({selector.describe()})"
                entry.publish(Notice(topic=RESUMED_TOPIC, message=message))
        return rollouts, released

    def _hold(self, entry: RouteEntry, selector: CallSelector) -> None:
        if entry.gate.hold(selector):
            entry.publish(Notice(topic=PAUSED_TOPIC, message=f"paused ({selector.describe()})"))

    def _matching(self, selector: CallSelector) -> Iterator[RouteEntry]:
        return (entry for entry in list(self._entries.values()) if selector.matches(entry))

    def _remember(self, selector: CallSelector) -> None:
        known = selector in self._versions or selector in self._pauses
        if not known and len(self._versions) + len(self._pauses) >= _MAX_RULES:
            raise SpecError(
                [FieldViolation("selector", f"more than {_MAX_RULES} distinct selectors in use")]
            )
