"""ModelCalls alone: which gates a selector reaches, standing versions and pauses, tenancy,
and the bounds on standing rules and pauses."""

from __future__ import annotations

import asyncio

import pytest

from service.engine.model_calls import (
    PAUSED_TOPIC,
    RESUMED_TOPIC,
    CallSelector,
    ModelCalls,
    RouteEntry,
)
from service.errors import CapacityError, SpecError
from service.models import EventPayload, Notice
from service.proxy.capture.gate import CallGate

URL = "http://gpu-node:8000/v1"


def model_calls(*, rules_per_tenant: int = 256, pause_max_s: float = 600.0) -> ModelCalls:
    return ModelCalls(rules_per_tenant=rules_per_tenant, pause_max_s=pause_max_s)


def entry(
    notices: list[str], *, tenant: str = "", labels: dict[str, str] | None = None
) -> RouteEntry:
    def publish(payload: EventPayload) -> None:
        assert isinstance(payload, Notice)
        notices.append(payload.topic)

    return RouteEntry("r", tenant, URL, "policy", labels or {}, CallGate(), publish)


async def test_a_route_registered_later_starts_at_the_standing_version_and_held() -> None:
    calls = model_calls()
    endpoint = CallSelector.endpoint(None, "http://gpu-node:8000/", "")
    assert calls.set_version(endpoint, 4) == 0
    report = await calls.pause(endpoint, abort_in_flight=False)
    assert report.rollouts == 0
    notices: list[str] = []
    later = entry(notices)
    calls.register(later)
    assert later.gate.version == 4  # the base URL matched as a resolved one ("/v1" added)
    assert later.gate.held
    assert notices == [PAUSED_TOPIC]
    assert calls.resume(endpoint) == (1, 0)
    assert not later.gate.held
    assert notices == [PAUSED_TOPIC, RESUMED_TOPIC]


async def test_resume_counts_and_lifts_only_what_its_own_pause_held() -> None:
    calls = model_calls()
    notices: list[str] = []
    labelled = entry(notices, labels={"run": "a"})
    calls.register(labelled)
    by_labels = CallSelector.by_labels(None, {"run": "a"})
    endpoint = CallSelector.endpoint(None, URL, "policy")
    await calls.pause(by_labels, abort_in_flight=False)
    assert calls.resume(endpoint) == (0, 0)  # no pause with that selector
    await calls.pause(endpoint, abort_in_flight=False)
    assert calls.resume(endpoint) == (1, 0)
    assert labelled.gate.held  # the label-wide pause still holds it
    assert notices == [PAUSED_TOPIC]


async def test_a_tenant_reaches_only_its_own_routes() -> None:
    calls = model_calls()
    mine, theirs = entry([], tenant="a"), entry([], tenant="b")
    calls.register(mine)
    calls.register(theirs)
    assert calls.set_version(CallSelector.endpoint("a", URL, ""), 2) == 1
    assert (mine.gate.version, theirs.gate.version) == (2, None)
    assert calls.set_version(CallSelector.endpoint(None, URL, ""), 3) == 2  # an admin


async def test_a_version_below_a_selected_routes_is_refused_naming_version() -> None:
    calls = model_calls()
    calls.register(entry([]))
    selector = CallSelector.endpoint(None, URL, "")
    calls.set_version(selector, 5)
    with pytest.raises(SpecError) as refused:
        calls.set_version(selector, 4)
    assert [v.field for v in refused.value.violations] == ["version"]


@pytest.mark.parametrize("base_url", ["", "ftp://gpu-node/v1", "http://"])
def test_an_unusable_base_url_is_refused_naming_it(base_url: str) -> None:
    with pytest.raises(SpecError) as refused:
        CallSelector.endpoint(None, base_url, "")
    assert [v.field for v in refused.value.violations] == ["selector.endpoint.base_url"]


def run(tenant: str | None, value: str) -> CallSelector:
    return CallSelector.by_labels(tenant, {"run": value})


async def test_a_tenant_at_its_bound_is_refused_and_others_are_not() -> None:
    calls = model_calls(rules_per_tenant=2)
    for value in ("1", "2"):
        await calls.pause(run("a", value), abort_in_flight=False)
    with pytest.raises(CapacityError, match=r"tenant 'a' has 2 .* its limit"):
        await calls.pause(run("a", "3"), abort_in_flight=False)
    with pytest.raises(CapacityError):
        calls.set_version(run("a", "3"), 1)
    await calls.pause(run("a", "1"), abort_in_flight=False)  # one it has: no new rule
    await calls.pause(run("b", "1"), abort_in_flight=False)
    calls.set_version(run(None, "1"), 1)
    assert (calls.rules("a"), calls.rules("b"), calls.rules(None)) == (2, 1, 1)


async def test_resume_frees_its_rule() -> None:
    calls = model_calls(rules_per_tenant=1)
    await calls.pause(run("a", "1"), abort_in_flight=False)
    assert calls.rules("a") == 1
    calls.resume(run("a", "1"))
    assert calls.rules("a") == 0
    await calls.pause(run("a", "2"), abort_in_flight=False)


def test_a_version_covered_by_a_newer_one_is_freed() -> None:
    calls = model_calls()
    calls.set_version(CallSelector.by_labels("a", {"run": "1", "step": "4"}), 4)
    calls.set_version(CallSelector.endpoint("a", URL, "policy"), 4)
    calls.set_version(CallSelector.endpoint("b", URL, ""), 4)  # another tenant's: kept
    assert calls.rules("a") == 2
    calls.set_version(CallSelector.by_labels("a", {"run": "1"}), 5)
    calls.set_version(CallSelector.endpoint("a", URL, ""), 5)
    assert (calls.rules("a"), calls.rules("b")) == (2, 1)
    later = entry([], tenant="a", labels={"run": "1", "step": "4"})
    calls.register(later)
    assert later.gate.version == 5


def test_at_the_bound_the_oldest_version_reaching_no_live_route_gives_way() -> None:
    calls = model_calls(rules_per_tenant=2)
    live = entry([], tenant="a", labels={"run": "1"})
    calls.register(live)
    calls.set_version(run("a", "1"), 1)  # reaches a live route: in force
    calls.set_version(run("a", "2"), 1)
    calls.set_version(run("a", "3"), 1)  # run=2 reaches nothing: it gives way
    assert calls.rules("a") == 2
    later = entry([], tenant="a", labels={"run": "2"})
    calls.register(later)
    assert later.gate.version is None
    calls.register(entry([], tenant="a", labels={"run": "3"}))
    with pytest.raises(CapacityError):
        calls.set_version(run("a", "4"), 1)  # both remaining reach live routes


async def test_a_pause_lifts_itself_after_its_maximum_duration() -> None:
    calls = model_calls(pause_max_s=0.05)
    resumed = asyncio.Event()

    def publish(payload: EventPayload) -> None:
        assert isinstance(payload, Notice)
        if payload.topic == RESUMED_TOPIC:
            assert payload.message.startswith("pause expired after 0.05s")
            resumed.set()

    held = RouteEntry("r", "a", URL, "policy", {"run": "1"}, CallGate(), publish)
    calls.register(held)
    await calls.pause(run("a", "1"), abort_in_flight=False)
    assert held.gate.held
    await resumed.wait()
    assert not held.gate.held
    assert calls.rules("a") == 0
