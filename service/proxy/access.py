"""How an agent inside a sandbox reaches its rollout's route (`ModelAccess`).

A local sandbox has no network to the proxy: the service starts a forwarder in it
(`start_forwarder`, TCP on the sandbox's loopback -> its route socket) on the server's
own interpreter, whatever the image holds (`sandboxes.local.host_kit`).
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Sequence

from service.errors import SandboxError
from service.models import ModelAccess
from service.proxy.capture.rewrite import AUX_MODEL_ALIAS, MAIN_MODEL_ALIAS
from service.proxy.capture.route import Route
from service.sandboxes import PROXY_SOCKET, Sandbox

__all__ = [
    "DEFAULT_FORWARD_PORT",
    "SOCKET_ROUTE_KEY",
    "direct_access",
    "forwarder_command",
    "host_socket_access",
    "start_forwarder",
    "stop_forwarder",
]

DEFAULT_FORWARD_PORT = 48080
"""Loopback port of the forwarder inside a sandbox with its own network namespace."""
SOCKET_ROUTE_KEY = "sandbox-route"
"""What an agent on a socket route sends as its key: not a secret, the socket is the route."""
_FORWARDER_START_TIMEOUT_S = 30.0
_FORWARDER_ERROR_CHARS = 2000


def host_socket_access(*, port: int = DEFAULT_FORWARD_PORT) -> ModelAccess:
    """Access through the sandbox's own route socket at PROXY_SOCKET (local sandbox), by
    the forwarder `start_forwarder` runs before the agent starts. The URL holds no token:
    whatever reaches the socket is this sandbox, so there is nothing to leak."""
    return ModelAccess(
        base_url=f"http://127.0.0.1:{port}/v1",
        api_key=SOCKET_ROUTE_KEY,
        model=MAIN_MODEL_ALIAS,
        small_model=AUX_MODEL_ALIAS,
    )


def forwarder_command(python_argv: Sequence[str], *, port: int = DEFAULT_FORWARD_PORT) -> str:
    """The shell command starting `forward.py` (TCP 127.0.0.1:port -> PROXY_SOCKET);
    `python_argv` runs the forwarder script in the sandbox (`LocalSandbox.forwarder_argv`).
    It returns once the port listens, or exits 1 after printing why on stderr."""
    listen = ["--listen", f"127.0.0.1:{port}", "--unix", PROXY_SOCKET]
    return shlex.join([*python_argv, *listen])


async def start_forwarder(
    sandbox: Sandbox, python_argv: Sequence[str], *, port: int = DEFAULT_FORWARD_PORT
) -> int:
    """Start the forwarder in `sandbox` as the service's plumbing, not the agent's command:
    if it cannot start, the rollout fails as SANDBOX (infrastructure), naming why, and no
    agent runs against a dead port whose failure would be scored as the agent's. Returns
    its pid in the sandbox."""
    command = forwarder_command(python_argv, port=port)
    result = await sandbox.exec(command, timeout_s=_FORWARDER_START_TIMEOUT_S)
    pid = result.stdout.strip().rsplit("\n", 1)[-1]
    if result.exit_code != 0 or not pid.isdigit():
        how = "timed out" if result.timed_out else f"exit {result.exit_code}"
        detail = (result.stderr or result.stdout).strip()[-_FORWARDER_ERROR_CHARS:]
        raise SandboxError(f"the capture proxy's forwarder did not start ({how}): {detail}")
    return int(pid)


async def stop_forwarder(sandbox: Sandbox, pid: int) -> None:
    """Stop the forwarder as the agent's model access ends, so what is still running when
    the verifier takes the sandbox back is the agent's alone (`verifier.takeover` reports
    it). A sandbox already gone has no forwarder left to stop."""
    with contextlib.suppress(SandboxError):
        await sandbox.exec(
            f"kill -KILL {pid} 2>/dev/null; true", timeout_s=_FORWARDER_START_TIMEOUT_S
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
