"""The E2B backend with the real `e2b` SDK against a fake E2B cloud on loopback: create,
commands (foreground, background, streamed), files, timeouts, and a sandbox dying mid-way.
Commands really run (under bubblewrap, inside the fake envd)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.errors import SandboxError
from service.models import ErrorKind, NetworkPolicy
from service.sandboxes.base import WORKDIR, OutputStream
from service.sandboxes.e2b.backend import INSTANCE_LABEL, ROLLOUT_LABEL, E2BBackend
from service.sandboxes.e2b.sandbox import E2BSandbox
from testing.e2b_support import fake_cloud, make_backend, make_request
from testing.fakes.e2b_cloud import FakeE2B

HOST_SECRET = "sk-host-secret-never-in-a-sandbox"


@pytest.fixture
async def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeE2B]:
    monkeypatch.setenv("OPENAI_API_KEY", HOST_SECRET)
    async with fake_cloud(tmp_path, monkeypatch) as fake:
        yield fake


@pytest.fixture
async def backend(cloud: FakeE2B, tmp_path: Path) -> AsyncIterator[E2BBackend]:
    backend = make_backend(
        tmp_path, output_head_bytes=64, output_tail_bytes=64, e2b_lifetime_margin_s=10.0
    )
    yield backend
    await backend.close()


@pytest.fixture
async def sandbox(backend: E2BBackend) -> AsyncIterator[E2BSandbox]:
    sandbox = await backend.create(make_request())
    yield sandbox
    await sandbox.kill()


async def test_create_asks_for_template_lifetime_labels_and_no_internet(
    backend: E2BBackend, cloud: FakeE2B
) -> None:
    sandbox = await backend.create(make_request("r-7", template="my-template", lifetime_s=61.2))
    body = cloud.create_bodies[-1]
    assert body["templateID"] == "my-template"
    assert body["timeout"] == 72  # lifetime plus the margin, rounded up
    assert body["metadata"] == {INSTANCE_LABEL: "test-instance", ROLLOUT_LABEL: "r-7"}
    assert body["allow_internet_access"] is False
    assert body["envVars"] == {}
    assert cloud.live_ids() == {sandbox.id}


async def test_default_template_and_full_network(backend: E2BBackend, cloud: FakeE2B) -> None:
    await backend.create(make_request(network=NetworkPolicy.FULL))
    assert cloud.create_bodies[-1]["templateID"] == "base-template"
    assert cloud.create_bodies[-1]["allow_internet_access"] is True


@pytest.mark.parametrize(
    ("network", "reachable"), [(NetworkPolicy.NONE, False), (NetworkPolicy.FULL, True)]
)
async def test_network_policy_reaches_the_sandbox(
    backend: E2BBackend, network: NetworkPolicy, reachable: bool
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        sandbox = await backend.create(make_request(network=network))
        probe = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo reached"
        result = await sandbox.exec(probe, timeout_s=30)
    assert (result.stdout == "reached\n") is reachable


async def test_commands_run_in_the_workdir_without_host_secrets(sandbox: E2BSandbox) -> None:
    result = await sandbox.exec("pwd; env", timeout_s=30, env={"TASK_VAR": "given"})
    assert result.exit_code == 0
    assert result.stdout.startswith(f"{WORKDIR}\n")
    assert "TASK_VAR=given" in result.stdout
    assert HOST_SECRET not in result.stdout
    assert "E2B_API_KEY" not in result.stdout


async def test_exec_reports_exit_code_and_streams_output(sandbox: E2BSandbox) -> None:
    seen: list[tuple[OutputStream, bytes]] = []
    result = await sandbox.exec(
        "echo out; echo err >&2; exit 3",
        timeout_s=30,
        on_output=lambda stream, data: seen.append((stream, data)),
    )
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert (result.stdout_bytes, result.stderr_bytes, result.timed_out) == (4, 4, False)
    assert b"".join(d for s, d in seen if s is OutputStream.STDOUT) == b"out\n"
    assert b"".join(d for s, d in seen if s is OutputStream.STDERR) == b"err\n"


async def test_exec_keeps_head_and_tail_of_big_output(sandbox: E2BSandbox) -> None:
    result = await sandbox.exec("head -c 100000 /dev/zero | tr '\\0' x; echo END", timeout_s=30)
    assert result.stdout_bytes == 100004
    assert result.stdout.startswith("x" * 64)
    assert result.stdout.endswith("xxxEND\n")
    assert "bytes elided" in result.stdout


async def test_exec_timeout_kills_the_whole_process_group(sandbox: E2BSandbox) -> None:
    result = await sandbox.exec("sleep 300 & echo $! > /tmp/child; echo started; wait", timeout_s=1)
    assert (result.exit_code, result.timed_out, result.stdout) == (-1, True, "started\n")
    assert await _state_of_pid_in(sandbox, "/tmp/child") == "gone"


async def test_cancelled_exec_kills_its_command(sandbox: E2BSandbox) -> None:
    run = asyncio.create_task(sandbox.exec("sleep 300 & echo $! > /tmp/pid; wait", timeout_s=600))
    await _until_file(sandbox, "/tmp/pid")
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert await _state_of_pid_in(sandbox, "/tmp/pid") == "gone"


async def test_spawn_streams_output_live_and_waits(sandbox: E2BSandbox) -> None:
    ready = asyncio.Event()
    chunks: list[bytes] = []

    def on_output(stream: OutputStream, data: bytes) -> None:
        chunks.append(data)
        if b"ready" in b"".join(chunks):
            ready.set()

    script = "echo ready; until [ -f go ]; do sleep 0.05; done; echo done"
    process = await sandbox.spawn(script, on_output=on_output)
    await asyncio.wait_for(ready.wait(), 30)  # output arrives while the command still runs
    await sandbox.write_files({f"{WORKDIR}/go": b""})
    result = await process.wait()
    assert (result.exit_code, result.stdout) == (0, "ready\ndone\n")
    assert b"".join(chunks) == b"ready\ndone\n"


async def test_background_kill_takes_children_and_is_idempotent(sandbox: E2BSandbox) -> None:
    process = await sandbox.spawn("sleep 300 & echo $! > /tmp/child; wait")
    await _until_file(sandbox, "/tmp/child")
    await process.kill()
    await process.kill()
    result = await process.wait()
    assert result.exit_code == -1
    assert await _state_of_pid_in(sandbox, "/tmp/child") == "gone"


async def test_cancelling_a_wait_leaves_the_command_running(sandbox: E2BSandbox) -> None:
    process = await sandbox.spawn("until [ -f /tmp/go ]; do sleep 0.05; done; echo finished")
    waiter = asyncio.create_task(process.wait())
    await asyncio.sleep(0.2)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await sandbox.write_files({"/tmp/go": b""})
    result = await process.wait()
    assert (result.exit_code, result.stdout) == (0, "finished\n")


async def test_files_round_trip(sandbox: E2BSandbox) -> None:
    blob = bytes(range(256)) * 64
    await sandbox.write_files({f"{WORKDIR}/deep/dir/blob.bin": blob, "/tmp/note.txt": b"hi\n"})
    assert await sandbox.read_file(f"{WORKDIR}/deep/dir/blob.bin", max_bytes=1 << 20) == blob
    assert await sandbox.read_file(f"{WORKDIR}/deep/dir/blob.bin", max_bytes=10) == blob[:10]
    assert await sandbox.read_file("/tmp/absent", max_bytes=10) is None
    listed = await sandbox.exec("cat /tmp/note.txt; wc -c < deep/dir/blob.bin", timeout_s=30)
    assert listed.stdout == "hi\n16384\n"


async def test_sandbox_dying_mid_command_is_a_sandbox_error(
    sandbox: E2BSandbox, cloud: FakeE2B
) -> None:
    run = asyncio.create_task(sandbox.exec("echo $$ > /tmp/pid; sleep 300", timeout_s=600))
    await _until_file(sandbox, "/tmp/pid")
    cloud.vanish(sandbox.id)
    with pytest.raises(SandboxError) as caught:
        await run
    assert caught.value.kind is ErrorKind.SANDBOX


async def test_sandbox_vanishing_silently_is_noticed(sandbox: E2BSandbox, cloud: FakeE2B) -> None:
    process = await sandbox.spawn("echo $$ > /tmp/pid; sleep 300")
    await _until_file(sandbox, "/tmp/pid")
    cloud.vanish(sandbox.id, drop_connections=False)
    with pytest.raises(SandboxError, match="stopped while a command was running"):
        await process.wait()


async def test_one_listing_tells_a_vanished_sandbox_from_a_live_one(
    backend: E2BBackend, sandbox: E2BSandbox, cloud: FakeE2B
) -> None:
    """The backend's one listing a round (`presence`) ends the command of the sandbox that
    vanished and keeps the other one's waiting."""
    other = await backend.create(make_request("rollout-2"))
    try:
        processes = []
        for each in (sandbox, other):
            processes.append(await each.spawn("echo $$ > /tmp/pid; sleep 300"))
            await _until_file(each, "/tmp/pid")
        waits = [asyncio.create_task(process.wait()) for process in processes]
        cloud.vanish(sandbox.id, drop_connections=False)
        with pytest.raises(SandboxError, match="stopped while a command was running"):
            await waits[0]
        assert not waits[1].done()
        assert (await other.exec("echo alive", timeout_s=30)).stdout == "alive\n"
        await processes[1].kill()
        assert (await waits[1]).exit_code == -1
    finally:
        await other.kill()


async def test_calls_on_a_dead_sandbox_fail_with_sandbox_error(
    sandbox: E2BSandbox, cloud: FakeE2B
) -> None:
    cloud.vanish(sandbox.id)
    with pytest.raises(SandboxError):
        await sandbox.exec("true", timeout_s=30)
    with pytest.raises(SandboxError):
        await sandbox.write_files({"/tmp/x": b"x"})
    await sandbox.kill()  # never raises, even though E2B no longer knows the sandbox


async def _until_file(sandbox: E2BSandbox, path: str) -> None:
    """Poll the sandbox (nothing there can notify us) until `path` exists."""
    async with asyncio.timeout(30):
        while True:
            if await sandbox.read_file(path, max_bytes=64) is not None:
                return
            await asyncio.sleep(0.02)


async def _state_of_pid_in(sandbox: E2BSandbox, pid_file: str) -> str:
    """ "gone" when the process whose pid is in `pid_file` no longer runs (zombies count)."""
    script = (
        f"s=$(awk '/^State/{{print $2}}' /proc/$(cat {pid_file})/status 2>/dev/null); "
        'if [ -z "$s" ] || [ "$s" = Z ]; then echo gone; else echo alive; fi'
    )
    result = await sandbox.exec(script, timeout_s=30)
    return result.stdout.strip()
