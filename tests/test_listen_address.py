"""`names_listener`: which Host headers name a listener (the DNS-rebinding check)."""

from __future__ import annotations

import pytest

from service.listen_address import names_listener

NAMES = ("rollout.example.internal",)


@pytest.mark.parametrize(
    ("header", "listen_host"),
    [
        ("127.0.0.1:9464", "127.0.0.1"),
        ("127.0.0.1", "127.0.0.1"),
        ("localhost:9464", "127.0.0.1"),
        ("LocalHost.", "127.0.0.1"),
        ("[::1]:9464", "::1"),
        ("localhost", "::1"),
        ("10.0.0.7:9464", "0.0.0.0"),
        ("[fd00::7]:9464", "::"),
        ("rollout.example.internal:9464", "0.0.0.0"),
        ("Rollout.Example.Internal.", "127.0.0.1"),
        ("metrics.host:9464", "metrics.host"),
    ],
)
def test_its_own_names_are_accepted(header: str, listen_host: str) -> None:
    assert names_listener(header, listen_host, NAMES)


@pytest.mark.parametrize(
    ("header", "listen_host"),
    [
        ("attacker.example:9464", "127.0.0.1"),
        ("attacker.example", "0.0.0.0"),
        ("127.0.0.1.attacker.example", "127.0.0.1"),
        ("10.0.0.7:9464", "127.0.0.1"),
        ("localhost", "10.0.0.7"),
        ("localhost", "metrics.host"),
        ("127.0.0.1", "metrics.host"),
        ("127.0.0.1:x", "127.0.0.1"),
        ("[::1", "::1"),
        ("[attacker.example]:9464", "::"),
        ("", "127.0.0.1"),
        ("127.0.0.1, attacker.example", "127.0.0.1"),
    ],
)
def test_other_names_are_refused(header: str, listen_host: str) -> None:
    assert not names_listener(header, listen_host, NAMES)
