"""ModelCalls alone: which gates a selector reaches, standing versions and pauses, tenancy."""

from __future__ import annotations

import pytest

from service.engine.model_calls import (
    PAUSED_TOPIC,
    RESUMED_TOPIC,
    CallSelector,
    ModelCalls,
    RouteEntry,
)
from service.errors import SpecError
from service.models import EventPayload, Notice
from service.proxy.capture.gate import CallGate

URL = "http://gpu-node:8000/v1"


def entry(
    notices: list[str], *, tenant: str = "", labels: dict[str, str] | None = None
) -> RouteEntry:
    def publish(payload: EventPayload) -> None:
        assert isinstance(payload, Notice)
        notices.append(payload.topic)

    return RouteEntry("r", tenant, URL, "policy", labels or {}, CallGate(), publish)


async def test_a_route_registered_later_starts_at_the_standing_version_and_held() -> None:
    calls = ModelCalls()
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
    calls = ModelCalls()
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
    calls = ModelCalls()
    mine, theirs = entry([], tenant="a"), entry([], tenant="b")
    calls.register(mine)
    calls.register(theirs)
    assert calls.set_version(CallSelector.endpoint("a", URL, ""), 2) == 1
    assert (mine.gate.version, theirs.gate.version) == (2, None)
    assert calls.set_version(CallSelector.endpoint(None, URL, ""), 3) == 2  # an admin


async def test_a_version_below_a_selected_routes_is_refused_naming_version() -> None:
    calls = ModelCalls()
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
