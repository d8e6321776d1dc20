"""The front door checks its rollout-service before serving: a wrong target or token is one
line and exit 1 at launch, never an error inside a trainer's first call."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from testing.front_door import front_door
from testing.server_process import ServerProcess
from tests.e2e.auth_support import ADMIN_TOKEN

pytestmark = pytest.mark.e2e


def _launch(target: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "service.openenv", "--listen", "127.0.0.1:0"]
    return subprocess.run(
        [*command, "--target", target],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_an_unreachable_target_is_one_line() -> None:
    target = f"127.0.0.1:{_free_port()}"
    launched = _launch(target)
    assert launched.returncode == 1
    assert launched.stderr.splitlines() == [
        f"error: rollout-service at {target} is unreachable: nothing is listening there "
        f"(connection refused): is the server running at {target}?"
    ]


def test_a_wrong_or_missing_token_is_one_line(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "state", env={"ROLLOUT_AUTH_TOKENS": f'["{ADMIN_TOKEN}"]'})
    server.start()
    try:
        wrong = _launch(server.target, {"ROLLOUT_TOKEN": "not-the-token-0000"})
        missing = _launch(server.target, {"ROLLOUT_TOKEN": ""})
        door = front_door(tmp_path / "door", server.target, env={"ROLLOUT_TOKEN": ADMIN_TOKEN})
        door.start()
        door.stop()
    finally:
        server.stop()
    for launched, why in ((wrong, "wrong token"), (missing, "none given")):
        assert launched.returncode == 1
        [line] = launched.stderr.splitlines()
        assert line.startswith(
            f"error: rollout-service at {server.target} refused the token ({why})"
        )
        assert "not-the-token" not in line
