"""Which Host headers name a listener: its addresses, localhost on loopback, its names."""

from __future__ import annotations

import pytest

from service.listen_host import host_allowed, host_name

NAMES = frozenset({"dashboard.example.com"})


@pytest.mark.parametrize(
    ("host", "local"),
    [
        ("127.0.0.1:8080", "127.0.0.1"),
        ("127.0.0.1", "127.0.0.1"),
        ("localhost:8080", "127.0.0.1"),
        ("LocalHost.", "::1"),
        ("[::1]:8080", "::1"),
        ("127.0.0.1:8080", "::ffff:127.0.0.1"),  # a dual-stack listener reached over IPv4
        ("10.1.2.3:443", "10.1.2.3"),  # a wildcard listener, reached on this interface
        ("Dashboard.Example.com:443", "10.1.2.3"),
    ],
)
def test_the_listeners_own_names_are_allowed(host: str, local: str) -> None:
    assert host_allowed([host], local, NAMES)


@pytest.mark.parametrize(
    ("hosts", "local"),
    [
        (["attacker.example:8080"], "127.0.0.1"),  # DNS rebinding: a name the page owns
        (["localhost.attacker.example"], "127.0.0.1"),
        (["localhost"], "10.1.2.3"),  # localhost is no name of a remote interface
        (["10.9.9.9"], "10.1.2.3"),
        ([], "127.0.0.1"),
        (["127.0.0.1", "127.0.0.1"], "127.0.0.1"),
        (["127.0.0.1"], None),
    ],
)
def test_any_other_host_is_refused(hosts: list[str], local: str | None) -> None:
    assert not host_allowed(hosts, local, NAMES)


def test_a_host_is_compared_without_port_brackets_case_or_trailing_dot() -> None:
    assert host_name("[FE80::1]:8080") == "fe80::1"
    assert host_name("Example.COM.:443") == "example.com"
    assert host_name("::1") == "::1"
