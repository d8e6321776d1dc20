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


_METADATA = "169.254.169.254 is a cloud metadata address"


@pytest.mark.parametrize(
    "host",
    [
        "[::169.254.169.254]",  # IPv4-compatible
        "[::a9fe:a9fe]",
        "[0:0:0:0:0:0:a9fe:a9fe]",
        "[::ffff:0:169.254.169.254]",  # SIIT
        "[64:ff9b::169.254.169.254]",  # NAT64, the well-known prefix
        "[64:FF9B::A9FE:A9FE]",
        "[64:ff9b:1::a9fe:a9fe]",  # NAT64 local use, a /96 prefix
        "[64:ff9b:1:0:a9:fea9:fe00:0]",  # ... a /64 prefix
        "[64:ff9b:1:a9:fe:a9fe::]",  # ... a /56 prefix
        "[64:ff9b:1:a9fe:a9:fe00::]",  # ... a /48 prefix
        "[2002:a9fe:a9fe::1]",  # 6to4
        "[2001:0:4136:e378:8000:63bf:5601:5601]",  # Teredo: the client, inverted
        "[2001:0:a9fe:a9fe::1]",  # Teredo: the server
        "[::a9fe:a9fe%25eth0]",  # with a zone
    ],
)
def test_the_metadata_address_is_refused_in_every_spelling(host: str) -> None:
    """An IPv6 address that a translator or tunnel delivers to 169.254.169.254 is that
    address (issue 31)."""
    for settings in (Settings(), Settings(allow_private_endpoints=True)):
        assert _METADATA in _refusal(f"http://{host}:80/latest/meta-data", settings)


@pytest.mark.parametrize(
    "host",
    ["[::10.0.0.5]", "[64:ff9b::10.0.0.5]", "[2002:a00:5::]", "[64:ff9b:1::192.168.0.1]"],
)
def test_a_private_address_carried_in_ipv6_needs_the_operators_leave(host: str) -> None:
    assert "ROLLOUT_ALLOW_PRIVATE_ENDPOINTS=true" in _refusal(f"http://{host}/v1", Settings())
    validate_spec(_spec(f"http://{host}/v1"), Settings(allow_private_endpoints=True))


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
        "http://[2606:4700::1111]/v1",
        "http://[64:ff9b::8.8.8.8]/v1",
        "http://[2002:808:808::1]/v1",
    ],
)
def test_loopback_and_public_endpoints_are_accepted(base_url: str) -> None:
    validate_spec(_spec(base_url), Settings())
