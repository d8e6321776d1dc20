"""The trainer's standing rules on model calls: policy versions and pauses, by selector.

A rule is a standing version or a pause, kept so that routes opening later under a matching
selector start at that version, and held. Each tenant (an admin is one more) keeps at most
`per_tenant` of them, so one tenant cannot crowd out another's, and none stays forever:

    rule                 freed when
    pause                resumed with the same selector, or past its maximum duration
    version              set again with the same selector (replaced), or another of the
                         caller's versions covers its selector (it can never win again);
                         at the bound, the oldest version that reaches no live route gives
                         its place to the new rule

A tenant whose rules are all in force (pauses, and versions reaching live routes) is refused
the next one: `CapacityError` (RESOURCE_EXHAUSTED) naming its limit; other tenants are not
affected.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from service.errors import CapacityError, FieldViolation, SpecError
from service.proxy import normalized_base_url

__all__ = ["CallRules", "CallSelector", "Selectable"]


class Selectable(Protocol):
    """What a selector matches a route on."""

    @property
    def tenant(self) -> str: ...

    @property
    def base_url(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


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

    def matches(self, entry: Selectable) -> bool:
        if self.tenant is not None and entry.tenant != self.tenant:
            return False
        if self.labels:
            return all(entry.labels.get(key) == value for key, value in self.labels)
        return entry.base_url == self.base_url and self.model in ("", entry.model)

    def covers(self, other: CallSelector) -> bool:
        """Whether every route `other` matches, this matches too."""
        if self.tenant is not None and other.tenant != self.tenant:
            return False
        if self.labels:
            return bool(other.labels) and set(self.labels) <= set(other.labels)
        return (
            not other.labels and other.base_url == self.base_url and self.model in ("", other.model)
        )

    def describe(self) -> str:
        if self.labels:
            return "labels " + ", ".join(f"{key}={value}" for key, value in self.labels)
        return f"endpoint {self.base_url}" + (f" model {self.model}" if self.model else "")


class CallRules:
    """The standing versions and pauses, each tenant's bounded."""

    def __init__(self, *, per_tenant: int, in_force: Callable[[CallSelector], bool]) -> None:
        self.per_tenant = per_tenant
        self._in_force = in_force
        """Whether a selector reaches a live route now."""
        self._versions: dict[CallSelector, tuple[int, int]] = {}
        """Standing versions: selector -> (order set, version), oldest first; the newest
        matching wins."""
        self._pauses: dict[CallSelector, asyncio.TimerHandle] = {}
        """Pauses, each with the timer that lifts it at its maximum duration."""
        self._order = itertools.count()

    def count(self, tenant: str | None) -> int:
        """The tenant's rules now."""
        return sum(1 for selector in self._all() if selector.tenant == tenant)

    def version_for(self, entry: Selectable) -> int | None:
        """The newest standing version whose selector matches `entry`."""
        rules = [rule for selector, rule in self._versions.items() if selector.matches(entry)]
        return max(rules)[1] if rules else None

    def pauses_for(self, entry: Selectable) -> list[CallSelector]:
        return [selector for selector in self._pauses if selector.matches(entry)]

    def set_version(self, selector: CallSelector, version: int) -> None:
        """Stand `version` for `selector`, freeing the versions it supersedes."""
        superseded = [known for known in self._versions if selector.covers(known)]
        if not any(known.tenant == selector.tenant for known in superseded):
            self._make_room(selector.tenant)
        for known in superseded:
            del self._versions[known]
        self._versions[selector] = (next(self._order), version)

    def add_pause(self, selector: CallSelector, lift: Callable[[], object], max_s: float) -> None:
        """Stand a pause for `selector`, lifted by `lift` after `max_s` unless resumed first;
        pausing again with the same selector keeps the first deadline."""
        if selector in self._pauses:
            return
        self._make_room(selector.tenant)
        self._pauses[selector] = asyncio.get_running_loop().call_later(max_s, lift)

    def drop_pause(self, selector: CallSelector) -> None:
        timer = self._pauses.pop(selector, None)
        if timer is not None:
            timer.cancel()

    def _all(self) -> Iterator[CallSelector]:
        return itertools.chain(self._versions, self._pauses)

    def _make_room(self, tenant: str | None) -> None:
        """Room for one more of the tenant's rules: its oldest version reaching no live route
        goes if it must; CapacityError naming the limit if none can."""
        if self.count(tenant) < self.per_tenant:
            return
        for selector in self._versions:  # in the order set: the oldest first
            if selector.tenant == tenant and not self._in_force(selector):
                del self._versions[selector]
                return
        who = "the admin" if tenant is None else f"tenant {tenant!r}"
        raise CapacityError(
            f"{who} has {self.per_tenant} standing policy versions and pauses in force, its "
            f"limit (ROLLOUT_MODEL_CALL_RULES_PER_TENANT): resume a pause first"
        )
