"""`names_listener`: which Host headers name a listener (the DNS-rebinding check of the
Prometheus endpoint and the dashboard alike)."""

from __future__ import annotations

import pytest

from service.listen_address import names_listener

NAMES = ("rollout.example.internal", "Dashboard.Example.com")


@pytest.mark.parametrize(
    ("header", "listen_host"),
    [
        ("127.0.0.1:9464", "127.0.0.1"),
        ("127.0.0.1", "127.0.0.1"),
        ("localhost:9464", "127.0.0.1"),
        ("LocalHost.", "127.0.0.1"),
        ("[::1]:9464", "::1"),
        ("localhost", "::1"),
        ("[FE80::1]:8080", "fe80::1"),
        ("10.0.0.7:9464", "0.0.0.0"),
        ("[fd00::7]:9464", "::"),
        ("127.0.0.1:8080", "::"),  # a dual-stack listener reached over IPv4
        ("rollout.example.internal:9464", "0.0.0.0"),
        ("Rollout.Example.Internal.", "127.0.0.1"),
        ("dashboard.example.com:443", "10.1.2.3"),
        ("metrics.host:9464", "metrics.host"),
    ],
)
def test_its_own_names_are_accepted(header: str, listen_host: str) -> None:
    assert names_listener([header], listen_host, NAMES)


@pytest.mark.parametrize(
    ("header", "listen_host"),
    [
        ("attacker.example:9464", "127.0.0.1"),  # DNS rebinding: a name the page owns
        ("attacker.example", "0.0.0.0"),
        ("127.0.0.1.attacker.example", "127.0.0.1"),
        ("localhost.attacker.example", "127.0.0.1"),
        ("10.0.0.7:9464", "127.0.0.1"),
        ("localhost", "10.0.0.7"),  # localhost is no name of a remote interface
        ("localhost", "0.0.0.0"),
        ("localhost", "metrics.host"),
        ("127.0.0.1", "metrics.host"),
        ("127.0.0.1:x", "127.0.0.1"),
        ("[::1", "::1"),
        ("[attacker.example]:9464", "::"),
        ("", "127.0.0.1"),
        ("127.0.0.1, attacker.example", "127.0.0.1"),  # two Host headers, joined
    ],
)
def test_other_names_are_refused(header: str, listen_host: str) -> None:
    assert not names_listener([header], listen_host, NAMES)


@pytest.mark.parametrize("headers", [[], ["127.0.0.1", "127.0.0.1"]])
def test_a_request_without_exactly_one_host_is_refused(headers: list[str]) -> None:
    assert not names_listener(headers, "127.0.0.1", NAMES)
