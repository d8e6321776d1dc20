"""What stops a server at start, said in one line with exit code 2: a port another server
holds (unless both share it on purpose), a capture proxy on a non-loopback address, a bad
setting. And the suite's own isolation from the settings of whoever runs it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from testing.server_process import HARNESS_VARIABLES, ServerProcess, running

pytestmark = pytest.mark.e2e


@pytest.fixture
def free_port() -> int:
    """A loopback port nothing listens on (a server of the test binds it next)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def first(tmp_path: Path, free_port: int) -> Iterator[ServerProcess]:
    """A running server on 127.0.0.1:<free_port>."""
    server = ServerProcess(tmp_path / "first", env={"ROLLOUT_LISTEN": f"127.0.0.1:{free_port}"})
    with running(server):
        yield server


def refused(tmp_path: Path, env: Mapping[str, str], *args: str) -> str:
    """Start a server that must refuse to start; its one line on stderr."""
    result = subprocess.run(
        [sys.executable, "-m", "service.server", *args],
        env={**os.environ, "ROLLOUT_STATE_DIR": str(tmp_path / "refused"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "listening" not in result.stdout
    [line] = result.stderr.splitlines()
    assert line.startswith("rollout-service cannot start: ")
    return line


def test_a_second_server_on_a_port_in_use_names_the_address_and_its_holder(
    tmp_path: Path, first: ServerProcess, free_port: int
) -> None:
    line = refused(tmp_path, {"ROLLOUT_LISTEN": f"127.0.0.1:{free_port}"})

    assert f"127.0.0.1:{free_port} (ROLLOUT_LISTEN) is already in use" in line
    assert f"pid {first.pid} (" in line
    assert "ROLLOUT_LISTEN_REUSE_PORT=true" in line


def test_a_listen_flag_on_a_port_in_use_names_the_flag(
    tmp_path: Path, first: ServerProcess, free_port: int
) -> None:
    line = refused(tmp_path, {}, "--listen", f"127.0.0.1:{free_port}")

    assert f"127.0.0.1:{free_port} (--listen) is already in use by pid {first.pid}" in line
    assert "(ROLLOUT_LISTEN)" not in line


def test_a_name_that_resolves_to_the_port_in_use_is_refused_too(
    tmp_path: Path, first: ServerProcess, free_port: int
) -> None:
    # localhost is ::1 and 127.0.0.1: gRPC alone would bind ::1, warn, and serve half of it.
    line = refused(tmp_path, {"ROLLOUT_LISTEN": f"localhost:{free_port}"})

    assert f"localhost:{free_port} (ROLLOUT_LISTEN) is already in use by pid {first.pid}" in line


def test_asking_to_share_a_port_that_its_holder_does_not_share_is_refused(
    tmp_path: Path, first: ServerProcess, free_port: int
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "service.server"],
        env={
            **os.environ,
            "ROLLOUT_STATE_DIR": str(tmp_path / "second"),
            "ROLLOUT_LISTEN": f"127.0.0.1:{free_port}",
            "ROLLOUT_LISTEN_REUSE_PORT": "true",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 2, result.stdout + result.stderr
    # gRPC logs its own line first; ours is the last.
    line = result.stderr.splitlines()[-1]
    assert f"127.0.0.1:{free_port} (ROLLOUT_LISTEN) is already in use by pid {first.pid}" in line


def test_servers_share_a_port_when_each_asks_to(tmp_path: Path, free_port: int) -> None:
    env = {"ROLLOUT_LISTEN": f"127.0.0.1:{free_port}", "ROLLOUT_LISTEN_REUSE_PORT": "true"}
    servers = [ServerProcess(tmp_path / name, env=env) for name in ("one", "two")]
    try:
        targets = [server.start() for server in servers]
    finally:
        codes = [server.stop() for server in servers]

    assert targets == [f"127.0.0.1:{free_port}"] * 2
    assert codes == [0, 0]


def test_a_proxy_port_in_use_names_the_setting_and_its_holder(
    tmp_path: Path, first: ServerProcess, free_port: int
) -> None:
    line = refused(
        tmp_path,
        {"ROLLOUT_LISTEN": "127.0.0.1:0", "ROLLOUT_PROXY_LISTEN": f"127.0.0.1:{free_port}"},
    )

    assert f"127.0.0.1:{free_port} (ROLLOUT_PROXY_LISTEN) is already in use" in line
    assert f"pid {first.pid} (" in line


def test_a_proxy_on_every_interface_is_refused_as_the_api_would_be(tmp_path: Path) -> None:
    line = refused(tmp_path, {"ROLLOUT_LISTEN": "127.0.0.1:0", "ROLLOUT_PROXY_LISTEN": "0.0.0.0:0"})

    assert "refusing to listen on 0.0.0.0:0 (ROLLOUT_PROXY_LISTEN" in line
    assert "plain HTTP" in line
    assert "ROLLOUT_ALLOW_INSECURE_LISTEN=true" in line


def test_a_proxy_on_every_interface_starts_with_a_warning_when_allowed(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "state",
        env={"ROLLOUT_PROXY_LISTEN": "0.0.0.0:0", "ROLLOUT_ALLOW_INSECURE_LISTEN": "true"},
    )
    server.start()
    assert server.stop() == 0, server.text()

    assert "WARNING" in server.text()
    assert "serving 0.0.0.0:0 (ROLLOUT_PROXY_LISTEN, the capture proxy) without TLS" in (
        server.text()
    )


@pytest.mark.parametrize(
    ("env", "args", "expected"),
    [
        (
            {"ROLLOUT_MAX_RUNNING": "abc"},
            (),
            "ROLLOUT_MAX_RUNNING is 'abc': expected a valid integer",
        ),
        ({}, ("--max-running", "abc"), "--max-running is 'abc': expected a valid integer"),
        (
            {"ROLLOUT_PROXY_LISTEN": "0.0.0.0"},
            (),
            "ROLLOUT_PROXY_LISTEN is '0.0.0.0': expected HOST:PORT",
        ),
        (
            {"ROLLOUT_SANDBOX_MEMORY_MB": "999999"},
            (),
            "ROLLOUT_SANDBOX_MEMORY_MB is 999999: expected at most ROLLOUT_SANDBOX_MEMORY_MB_MAX",
        ),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_variable_the_value_and_what_is_expected(
    tmp_path: Path, env: dict[str, str], args: tuple[str, ...], expected: str
) -> None:
    assert expected in refused(tmp_path, env, *args)


def test_a_bad_secret_setting_is_named_without_its_value(tmp_path: Path) -> None:
    line = refused(tmp_path, {"ROLLOUT_AUTH_TOKENS": "tok-5e3c9 tenant-a"})

    assert "ROLLOUT_AUTH_TOKENS is (hidden): expected a valid list" in line
    assert "tok-5e3c9" not in line


def test_no_inherited_setting_reaches_a_test_or_its_server(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "state")

    for environment in (os.environ, server.env):
        seen = {name for name in environment if name.startswith("ROLLOUT_")}
        assert seen <= {"ROLLOUT_SANDBOX_IMAGE", "ROLLOUT_STATE_DIR", *HARNESS_VARIABLES}


def test_the_suite_forgets_the_settings_of_whoever_runs_it() -> None:
    # A shell's settings that would break the test above, and every server the suite starts.
    shell = {"ROLLOUT_LISTEN": "127.0.0.1:1", "ROLLOUT_MAX_RUNNING": "abc"}
    test = f"{__file__}::test_no_inherited_setting_reaches_a_test_or_its_server"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        env={**os.environ, **shell},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
