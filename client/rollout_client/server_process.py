"""The server as a process of its own: how the client starts it without importing it.

The server is another distribution (rollout-service); the client only checks that it is
installed beside it and runs its entry point, `python -m service.server`, with this interpreter.
"""

from __future__ import annotations

import importlib.util
import sys

from rollout_client.exits import fail

__all__ = ["require_server", "server_argv"]

SERVER_MODULE = "service.server"


def require_server(command: str) -> None:
    """Fail with one line saying what to install when the server is not installed here."""
    if importlib.util.find_spec("service") is None:
        fail(f"{command} needs the server (service is missing): install rollout-service")


def server_argv(*args: str) -> list[str]:
    """The command line that runs the server with `args` (its flags)."""
    return [sys.executable, "-m", SERVER_MODULE, *args]
