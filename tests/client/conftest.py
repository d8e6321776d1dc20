"""Fixtures of the client tests."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture
def closed_target() -> str:
    """A loopback host:port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"
