"""ROLLOUT_DASHBOARD_LISTEN that cannot be served stops the server at start, naming the setting,
before anything opens."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def refused_start(tmp_path: Path, dashboard_listen: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.server"],
        env={
            **os.environ,
            "ROLLOUT_STATE_DIR": str(tmp_path / "state"),
            "ROLLOUT_LISTEN": "127.0.0.1:0",
            "ROLLOUT_DASHBOARD_LISTEN": dashboard_listen,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_address_without_a_port_is_refused(tmp_path: Path) -> None:
    refused = refused_start(tmp_path, "localhost")
    assert refused.returncode == 2
    assert "ROLLOUT_DASHBOARD_LISTEN is 'localhost': expected HOST:PORT" in refused.stderr
    assert not (tmp_path / "state").exists()


def test_a_port_in_use_is_refused(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        refused = refused_start(tmp_path, f"127.0.0.1:{port}")
    assert refused.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port} (ROLLOUT_DASHBOARD_LISTEN)" in refused.stderr
    assert not (tmp_path / "state").exists()
