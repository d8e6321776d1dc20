"""Fixtures of the client tests."""

from __future__ import annotations

import socket
import sys

import pytest

# Python turns SIGINT into KeyboardInterrupt only when its parent left SIGINT at its default:
# under a runner that ignores it (a CI job, `make test &` in a script) the CLI inherited
# SIG_IGN, never saw a test's Ctrl-C, and the test waited out its timeout.
_AS_IN_A_TERMINAL = (
    "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from rollout_client.cli import main; main()"
)


def cli_argv(*args: str) -> list[str]:
    """The `rollout` command line as a subprocess, with Ctrl-C (SIGINT) handled as it is for
    a terminal's foreground command, whatever the test runner's own disposition."""
    return [sys.executable, "-c", _AS_IN_A_TERMINAL, *args]


@pytest.fixture
def closed_target() -> str:
    """A loopback host:port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"
