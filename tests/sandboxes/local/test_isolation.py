"""What a local sandbox cannot do: escape, read the service's state, see secrets, use the net."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.config import Settings
from service.models import NetworkPolicy, SandboxSpec
from service.proxy.transport.unix_socket import bind_unix
from service.sandboxes.base import PROXY_SOCKET, WORKDIR, SandboxRequest
from service.sandboxes.local.backend import LocalBackend, LocalSandbox
from tests.sandboxes.conftest import MakeSandbox


async def test_cannot_write_outside_its_dirs(local_sandbox: LocalSandbox, tmp_path: Path) -> None:
    name = f"rollout-escape-{random.randrange(10**9)}"
    targets = [Path("/etc") / name, Path("/work") / name, Path("/usr") / name, tmp_path / name]
    for target in targets:
        result = await local_sandbox.exec(f"touch {target}", timeout_s=30)
        assert result.exit_code != 0
        assert not target.exists()
    private = await local_sandbox.exec(f"echo x > /tmp/{name} && cat /tmp/{name}", timeout_s=30)
    assert private.stdout == "x\n"
    assert not (Path("/tmp") / name).exists()


async def test_root_only_files_and_host_homes_are_out_of_reach(
    local_sandbox: LocalSandbox,
) -> None:
    result = await local_sandbox.exec("cat /etc/shadow", timeout_s=30)
    assert result.exit_code != 0
    assert "Permission denied" in result.stderr
    home = Path.home()
    private = [p for p in home.iterdir() if p.name not in {".pyenv", ".cargo", ".cache"}][:3]
    for path in private:
        assert (await local_sandbox.exec(f"test -e {path}", timeout_s=30)).exit_code == 1


@pytest.fixture(params=["under-tmp", "elsewhere"])
def state_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A state dir (holding a db) hidden by the private /tmp, and one by a tmpfs of its own."""
    if request.param == "under-tmp":
        (tmp_path / "state").mkdir()
        (tmp_path / "state" / "rollouts.db").write_text("database secret")
        yield tmp_path / "state"
        return
    outside = Path(tempfile.mkdtemp(prefix="rollout-state-", dir="/var/tmp"))
    (outside / "rollouts.db").write_text("database secret")
    yield outside
    shutil.rmtree(outside)


async def test_cannot_read_the_state_dir_or_other_sandboxes(
    state_dir: Path, tmp_path: Path
) -> None:
    backend = LocalBackend(Settings(state_dir=state_dir, cache_dir=tmp_path / "cache"))
    try:
        other = await backend.create(_request("other"))
        await other.write_files({f"{WORKDIR}/answer.txt": b"other rollout's secret"})
        mine = await backend.create(_request("mine"))
        other_workdir = state_dir / "sandboxes" / "other" / "disk" / "home" / "workdir"
        result = await mine.exec(
            f"cat {state_dir}/rollouts.db || echo no-db; "
            f"cat {other_workdir}/answer.txt || echo no-other; "
            f"ls -A {state_dir} 2>/dev/null | wc -l",
            timeout_s=30,
        )
        assert result.stdout.split() == ["no-db", "no-other", "0"]
    finally:
        await backend.close()


def _request(rollout_id: str) -> SandboxRequest:
    return SandboxRequest(rollout_id, SandboxSpec(), lifetime_s=300)


async def test_server_secrets_stay_out_of_the_environment(
    local_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLOUT_TEST_SECRET", "s3cr3t-7f2a")
    backend = LocalBackend(local_settings)
    try:
        sandbox = await backend.create(_request("env"))
        result = await sandbox.exec(
            "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'",
            timeout_s=30,
            env={"GIVEN": "by-caller"},
        )
        assert "s3cr3t-7f2a" not in result.stdout
        assert "GIVEN=by-caller" in result.stdout
        assert "HOME=/home/user" in result.stdout
    finally:
        await backend.close()


async def _host_listener() -> tuple[asyncio.Server, int, list[bool]]:
    accepted: list[bool] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(True)
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], accepted


@pytest.mark.parametrize("network", [NetworkPolicy.NONE, NetworkPolicy.FULL])
async def test_host_loopback_is_out_of_reach_under_any_network(
    make_local_sandbox: MakeSandbox, network: NetworkPolicy
) -> None:
    """FULL is the internet, not the host (tests/sandboxes/local/test_network.py)."""
    server, port, accepted = await _host_listener()
    async with server:
        sandbox = await make_local_sandbox(network=network)
        result = await sandbox.exec(f"exec 3<>/dev/tcp/127.0.0.1/{port}", timeout_s=30)
        await asyncio.sleep(0.05)  # let the server's accept callback run
    assert result.exit_code != 0, result.stderr
    assert not accepted


async def test_proxy_socket_is_reachable_under_network_none(
    make_local_sandbox: MakeSandbox, tmp_path: Path
) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"pong:" + await reader.read(4))
        await writer.drain()
        writer.close()

    sandbox = await make_local_sandbox(network=NetworkPolicy.NONE)
    path = sandbox.proxy_socket_path  # bound after the sandbox was made, as a route is
    # as the proxy binds it: a pytest temporary directory can be past sun_path's 108 bytes
    async with await asyncio.start_unix_server(answer, sock=bind_unix(path)):
        client = (
            "import socket; s = socket.socket(socket.AF_UNIX); "
            f"s.connect('{PROXY_SOCKET}'); s.sendall(b'ping'); print(s.recv(64).decode())"
        )
        result = await sandbox.exec(f'python3 -c "{client}"', timeout_s=30)
    assert result.stdout == "pong:ping\n", result.stderr
    assert os.stat(path).st_mode & 0o777 == 0o666


async def test_the_service_cache_is_visible_read_only(
    local_settings: Settings, make_local_sandbox: MakeSandbox
) -> None:
    tool = local_settings.cache_dir / "opencode" / "bin" / "tool"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho cached tool\n")
    tool.chmod(0o755)
    sandbox = await make_local_sandbox()
    result = await sandbox.exec(f"{tool} && touch {tool.parent}/new", timeout_s=30)
    assert result.stdout == "cached tool\n"
    assert result.exit_code != 0
    assert not (tool.parent / "new").exists()


async def test_commands_run_unprivileged_as_the_sandbox_uid(local_sandbox: LocalSandbox) -> None:
    result = await local_sandbox.exec(
        "id -u; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status",
        timeout_s=30,
    )
    uid, *status = result.stdout.splitlines()
    if os.geteuid() == 0:
        assert int(uid) >= 0x6000_0000
    fields = dict(line.split(":\t") for line in status)
    assert fields == {
        "CapInh": "0000000000000000",
        "CapPrm": "0000000000000000",
        "CapEff": "0000000000000000",
        "CapBnd": "0000000000000000",
        "CapAmb": "0000000000000000",
        "NoNewPrivs": "1",
    }


async def test_the_sandbox_cannot_kill_the_holder_of_its_namespaces(
    local_sandbox: LocalSandbox,
) -> None:
    result = await local_sandbox.exec("kill -9 1 2 || echo refused", timeout_s=30)
    assert result.stdout == "refused\n"
    await local_sandbox.exec("kill -9 -1", timeout_s=30)  # every process it may signal
    after = await local_sandbox.exec("echo alive", timeout_s=30)
    assert after.stdout == "alive\n"
