"""How an agent inside a sandbox reaches its rollout's route (`ModelAccess`)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from service.agents.base import ModelAccess
from service.proxy import forward
from service.proxy.capture.rewrite import AUX_MODEL_ALIAS, MAIN_MODEL_ALIAS
from service.proxy.capture.route import Route
from service.sandboxes.base import PROXY_SOCKET

__all__ = ["DEFAULT_FORWARD_PORT", "SOCKET_ROUTE_KEY", "direct_access", "host_socket_access"]

DEFAULT_FORWARD_PORT = 48080
"""Loopback port of the forwarder inside a sandbox with its own network namespace."""

_FORWARD_FAILED_EXIT = 70
SOCKET_ROUTE_KEY = "sandbox-route"
"""What an agent on a socket route sends as its key: not a secret, the socket is the route."""


def host_socket_access(
    *, port: int = DEFAULT_FORWARD_PORT, python: str = sys.executable
) -> ModelAccess:
    """Access through the sandbox's own route socket at PROXY_SOCKET (local sandbox).

    `command_prefix` starts `forward.py` (TCP 127.0.0.1:port -> PROXY_SOCKET) with the
    host's interpreter and returns once it listens. It ends in a newline: prepend it to
    the agent command as is (`prefix + command`). If the forwarder cannot start, the
    command exits 70 after the forwarder printed why on stderr. The URL holds no token:
    whatever reaches the socket is this sandbox, so there is nothing to leak.
    """
    script = Path(forward.__file__).resolve()
    prefix = (
        f"{shlex.quote(python)} -I -S {shlex.quote(str(script))} "
        f"--listen 127.0.0.1:{port} --unix {shlex.quote(PROXY_SOCKET)} "
        f"|| exit {_FORWARD_FAILED_EXIT}\n"
    )
    return ModelAccess(
        base_url=f"http://127.0.0.1:{port}/v1",
        api_key=SOCKET_ROUTE_KEY,
        model=MAIN_MODEL_ALIAS,
        small_model=AUX_MODEL_ALIAS,
        command_prefix=prefix,
    )


def direct_access(route: Route, proxy_url: str) -> ModelAccess:
    """Access over TCP at `proxy_url` (a sandbox sharing the proxy's network, or the
    standalone proxy inside a remote sandbox)."""
    return ModelAccess(
        base_url=f"{proxy_url.rstrip('/')}/r/{route.token}/v1",
        api_key=route.token,
        model=MAIN_MODEL_ALIAS,
        small_model=AUX_MODEL_ALIAS,
    )
