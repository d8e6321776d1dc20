"""A caller's `base_url` may not lead to a cloud metadata service, a link-local address or,
unless the operator allows it, a private range (issue 21); loopback stays open."""

from __future__ import annotations

import pytest

from service.config import Settings
from service.engine.validation import validate_spec
from service.errors import SpecError
from service.models import EndpointSpec, RolloutSpec, TaskSpec

_FIELD = "spec.endpoint.base_url"


def _spec(base_url: str) -> RolloutSpec:
    return RolloutSpec(
        task=TaskSpec(instruction="x"),
        agent={"command": "true"},  # type: ignore[arg-type]
        endpoint=EndpointSpec(base_url=base_url, model="m"),
    )


def _refusal(base_url: str, settings: Settings) -> str:
    with pytest.raises(SpecError) as caught:
        validate_spec(_spec(base_url), settings)
    (violation,) = caught.value.violations
    assert violation.field == _FIELD
    return violation.description


@pytest.mark.parametrize(
    ("base_url", "why"),
    [
        ("http://169.254.169.254/latest/meta-data", "169.254.169.254 is a cloud metadata address"),
        ("http://2852039166/v1", "169.254.169.254 is a cloud metadata address"),
        ("http://0xa9fea9fe/v1", "169.254.169.254 is a cloud metadata address"),
        ("http://[fd00:ec2::254]/v1", "fd00:ec2::254 is a cloud metadata address"),
        ("http://100.100.100.200/v1", "100.100.100.200 is a cloud metadata address"),
        ("http://metadata.google.internal./v1", "metadata.google.internal is a cloud metadata"),
        ("http://169.254.10.1:8000/v1", "169.254.10.1 is a link-local address"),
        ("http://[fe80::1]:8000/v1", "fe80::1 is a link-local address"),
        ("http://[::ffff:169.254.10.1]/v1", "169.254.10.1 is a link-local address"),
    ],
)
def test_metadata_and_link_local_are_always_refused(base_url: str, why: str) -> None:
    for settings in (Settings(), Settings(allow_private_endpoints=True)):
        assert why in _refusal(base_url, settings)


@pytest.mark.parametrize(
    "base_url",
    [
        "http://10.0.0.5:8000/v1",
        "https://172.20.1.1/v1",
        "http://192.168.1.10/v1",
        "http://100.64.0.7/v1",
        "http://[fd12:3456::1]/v1",
        "http://[::ffff:10.1.2.3]/v1",
    ],
)
def test_private_ranges_need_the_operators_leave(
    base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "ROLLOUT_ALLOW_PRIVATE_ENDPOINTS=true" in _refusal(base_url, Settings())
    monkeypatch.setenv("ROLLOUT_ALLOW_PRIVATE_ENDPOINTS", "true")
    validate_spec(_spec(base_url), Settings())


@pytest.mark.parametrize(
    "base_url",
    [
        "http://127.0.0.1:8000/v1",
        "http://localhost:8000/v1",
        "http://[::1]:8000/v1",
        "http://0.0.0.0:8000/v1",
        "https://api.openai.com/v1",
        "http://8.8.8.8/v1",
    ],
)
def test_loopback_and_public_endpoints_are_accepted(base_url: str) -> None:
    validate_spec(_spec(base_url), Settings())
