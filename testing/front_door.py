"""The OpenEnv front door for tests: `python -m service.openenv` in a subprocess on a loopback
port, in front of a real rollout-service server."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from testing.server_process import ServerProcess

__all__ = ["front_door"]


def front_door(
    state_dir: Path, target: str, *extra: str, env: dict[str, str] | None = None
) -> ServerProcess:
    """A front door to `target`, not yet started; `start()` returns its `http://host:port`."""
    command: Sequence[str] = (
        sys.executable,
        "-m",
        "service.openenv",
        "--listen",
        "127.0.0.1:0",
        "--target",
        target,
        *extra,
    )
    return ServerProcess(state_dir, env=env, command=command)
