"""The local (bubblewrap) backend: commands, streaming, timeouts, kill, sweep."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.config import Settings
from service.errors import MissingDependencyError, SandboxError
from service.models import SandboxSpec
from service.sandboxes.base import HOME, PROXY_DIR, WORKDIR, OutputStream, SandboxRequest
from service.sandboxes.local.backend import LocalBackend, LocalSandbox
from service.sandboxes.local.bwrap import SandboxLayout
from service.sandboxes.local.network import resolv_conf
from service.sandboxes.local.snapshot import LocalSnapshot
from service.sandboxes.local.warm import WarmKey
from tests.sandboxes.conftest import MakeSandbox, SleepMarker, fork_processes


async def test_exec_reports_exit_code_and_output(local_sandbox: LocalSandbox) -> None:
    result = await local_sandbox.exec("echo out; echo err >&2; exit 3", timeout_s=30)
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert (result.stdout_bytes, result.stderr_bytes, result.timed_out) == (4, 4, False)


async def test_exec_runs_bash_in_workdir_with_home(local_sandbox: LocalSandbox) -> None:
    result = await local_sandbox.exec('pwd; echo "$HOME"; echo "$BASH_VERSION"', timeout_s=30)
    lines = result.stdout.splitlines()
    assert lines[:2] == [WORKDIR, HOME]
    assert lines[2]


async def test_host_tools_are_available(local_sandbox: LocalSandbox) -> None:
    result = await local_sandbox.exec(
        "python3 --version && git --version && node --version && id -un", timeout_s=60
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "user"


async def test_its_etc_outlasts_the_host_replacing_its_files(local_sandbox: LocalSandbox) -> None:
    """Host tools replace an /etc file by renaming a new one into place (useradd, a DHCP
    client), and the kernel then detaches any mount on the old one: a sandbox binding its
    own resolv.conf or passwd over the host's would see the host's from then on.
    resolv.conf is replaced here by a copy of itself: nothing else in the suite writes it."""
    host = Path("/etc/resolv.conf")
    if not host.exists():
        pytest.skip("the host has no /etc/resolv.conf to replace")
    assert host.read_text() != resolv_conf()  # else the sandbox's could not be told apart
    replacement = host.with_name(f".resolv.conf.{os.getpid()}")
    if host.is_symlink():
        os.symlink(os.readlink(host), replacement)
    else:
        shutil.copy2(host, replacement)
    os.replace(replacement, host)
    result = await local_sandbox.exec(
        "cat /etc/resolv.conf; id -un; readlink /etc/mtab; grep -c ^ID= /etc/os-release",
        timeout_s=30,
    )
    assert result.exit_code == 0, result.stderr
    expected = [*resolv_conf().splitlines(), "user", os.readlink("/etc/mtab"), "1"]
    assert result.stdout.splitlines() == expected


async def test_a_server_under_umask_077_makes_sandboxes_its_user_can_use(
    make_local_sandbox: MakeSandbox,
) -> None:
    """A service manager's UMask=0077 must not lock the sandbox user out of its /etc or
    out of the directory its proxy socket appears in."""
    umask = os.umask(0o077)
    try:
        sandbox = await make_local_sandbox()
    finally:
        os.umask(umask)
    result = await sandbox.exec(
        f"id -un; cat /etc/resolv.conf; stat -c %a /etc {PROXY_DIR}", timeout_s=30
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == ["user", *resolv_conf().splitlines(), "755", "755"]


@pytest.fixture
def etc_mount(tmp_path: Path) -> Iterator[Path]:
    """A file under the host's /etc holding "beneath", a bind mount over it "mounted"."""
    point = Path(f"/etc/rollout-test-{os.getpid()}-{tmp_path.name}")
    point.write_text("beneath\n")
    mounted = tmp_path / "mounted"
    mounted.write_text("mounted\n")
    try:
        subprocess.run(["mount", "--bind", str(mounted), str(point)], check=True)
        try:
            yield point
        finally:
            subprocess.run(["umount", str(point)], check=True)
    finally:
        point.unlink()


async def test_a_mount_below_the_hosts_etc_shows_in_its_etc(
    local_settings: Settings, etc_mount: Path
) -> None:
    """A container's /etc/hosts is a bind mount: the sandbox's /etc, an overlay of the
    host's /etc, shows the file beneath unless the mount is bound again."""
    backend = LocalBackend(local_settings)  # its view of the host is taken here
    try:
        sandbox = await backend.create(SandboxRequest("r1", SandboxSpec(), lifetime_s=300))
        result = await sandbox.exec(f"cat {etc_mount}", timeout_s=30)
    finally:
        await backend.close()
    assert (result.exit_code, result.stdout) == (0, "mounted\n")


async def test_a_command_longer_than_an_argument_may_be(local_sandbox: LocalSandbox) -> None:
    command = f"x='{'y' * 300_000}'; echo ${{#x}} \"$0\"; exit 4"
    result = await local_sandbox.exec(command, timeout_s=30)
    assert (result.exit_code, result.stdout) == (4, "300000 bash\n")


async def test_concurrent_commands_keep_their_own_output(local_sandbox: LocalSandbox) -> None:
    results = await asyncio.gather(
        *(local_sandbox.exec(f"sleep 0.2; echo {i}; exit {i}", timeout_s=30) for i in range(8))
    )
    assert [(r.exit_code, r.stdout) for r in results] == [(i, f"{i}\n") for i in range(8)]


async def test_output_is_capped_head_and_tail(local_sandbox: LocalSandbox) -> None:
    result = await local_sandbox.exec("seq 1 100000", timeout_s=30)
    assert result.stdout.startswith("1\n2\n")
    assert result.stdout.endswith("99999\n100000\n")
    assert "elided" in result.stdout
    assert len(result.stdout) < 9000 < result.stdout_bytes


async def test_output_streams_before_the_command_exits(local_sandbox: LocalSandbox) -> None:
    seen = asyncio.Event()
    chunks: list[tuple[OutputStream, bytes]] = []

    def on_output(stream: OutputStream, chunk: bytes) -> None:
        chunks.append((stream, chunk))
        if b"ready" in chunk:
            seen.set()

    process = await local_sandbox.spawn("echo ready >&2; exec sleep 600", on_output=on_output)
    await seen.wait()
    assert chunks[0] == (OutputStream.STDERR, b"ready\n")
    await process.kill()
    assert (await process.wait()).exit_code == -1


async def test_timeout_kills_the_whole_tree(
    local_sandbox: LocalSandbox, sleep_marker: SleepMarker
) -> None:
    command = (
        f"({sleep_marker.command} &) ; {sleep_marker.command} & {sleep_marker.command}; echo never"
    )
    result = await local_sandbox.exec(command, timeout_s=1)
    assert (result.timed_out, result.exit_code) == (True, -1)
    assert "never" not in result.stdout
    assert sleep_marker.pids() == []


async def test_cancelling_exec_kills_it(
    local_sandbox: LocalSandbox, sleep_marker: SleepMarker
) -> None:
    task = asyncio.create_task(local_sandbox.exec(f"{sleep_marker.command} & wait", timeout_s=600))
    await sleep_marker.wait_running()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sleep_marker.pids() == []


async def test_spawn_runs_in_background_until_killed(
    local_sandbox: LocalSandbox, sleep_marker: SleepMarker
) -> None:
    process = await local_sandbox.spawn(f"{sleep_marker.command} & {sleep_marker.command}")
    await sleep_marker.wait_running(2)  # the first may be alone a while
    assert len(sleep_marker.pids()) == 2
    await process.kill()
    await process.kill()  # idempotent
    assert (await process.wait()).exit_code == -1
    assert sleep_marker.pids() == []


async def test_spawned_process_exit_code(local_sandbox: LocalSandbox) -> None:
    process = await local_sandbox.spawn("sleep 0.1; echo done; exit 7")
    result = await process.wait()
    assert (result.exit_code, result.stdout) == (7, "done\n")


async def test_a_child_in_a_session_of_its_own_is_killed_with_its_command(
    local_sandbox: LocalSandbox, sleep_marker: SleepMarker
) -> None:
    process = await local_sandbox.spawn(f"setsid {sleep_marker.command} & wait")
    await sleep_marker.wait_running()
    await process.kill()
    assert sleep_marker.pids() == []


async def test_a_daemon_is_killed_with_the_command_that_started_it(
    local_sandbox: LocalSandbox, sleep_marker: SleepMarker
) -> None:
    daemon = f"(setsid {sleep_marker.command} > /dev/null 2>&1 &)"
    process = await local_sandbox.spawn(f"{daemon}; exec sleep 600")
    await sleep_marker.wait_running()
    await process.kill()
    assert sleep_marker.pids() == []


async def test_killing_a_command_spares_the_same_command_of_another_sandbox(
    make_local_sandbox: MakeSandbox, sleep_marker: SleepMarker
) -> None:
    first, second = await make_local_sandbox("first"), await make_local_sandbox("second")
    doomed = await first.spawn(f"(setsid {sleep_marker.command} &); exec sleep 600")
    spared = await second.spawn(f"(setsid {sleep_marker.command} &); exec sleep 600")
    for _ in range(500):
        if len(sleep_marker.pids()) == 2:
            break
        await asyncio.sleep(0.02)
    await doomed.kill()
    assert len(sleep_marker.pids()) == 1
    await spared.kill()
    assert sleep_marker.pids() == []


async def test_the_sandbox_has_its_own_pid_namespace(local_sandbox: LocalSandbox) -> None:
    result = await local_sandbox.exec(
        "echo $$; cat /proc/1/comm; ls /proc | grep -c '^[0-9]'", timeout_s=30
    )
    own_pid, init, visible = result.stdout.split()
    assert init == "bwrap"  # the holder's init, not the host's
    assert int(own_pid) < 10
    assert int(visible) <= 6  # init, holder, this bash, ls, grep


async def test_a_daemon_outlives_its_command_until_teardown(
    make_local_sandbox: MakeSandbox, sleep_marker: SleepMarker
) -> None:
    sandbox = await make_local_sandbox("daemon")
    started = await sandbox.exec(f"setsid {sleep_marker.command} > /dev/null &", timeout_s=30)
    assert started.exit_code == 0
    await sleep_marker.wait_running()
    seen = await sandbox.exec(f"pgrep -f '{sleep_marker.command}'", timeout_s=30)
    assert seen.exit_code == 0, seen.stderr  # the same pid namespace as the next command
    await sandbox.kill()
    assert sleep_marker.pids() == []


async def test_a_job_in_a_group_of_its_own_is_killed_with_its_command(
    local_sandbox: LocalSandbox, sleep_marker: SleepMarker
) -> None:
    command = f"set -m; {sleep_marker.command} & {sleep_marker.command}"
    result = await local_sandbox.exec(command, timeout_s=1)
    assert result.timed_out
    assert sleep_marker.pids() == []
    after = await local_sandbox.exec("echo still here", timeout_s=30)
    assert after.stdout == "still here\n"


async def test_kill_ends_every_process_and_removes_the_dirs(
    local_settings: Settings, make_local_sandbox: MakeSandbox, sleep_marker: SleepMarker
) -> None:
    sandbox = await make_local_sandbox("gone")
    await sandbox.spawn(sleep_marker.command)
    await sandbox.spawn(sleep_marker.command)
    await sleep_marker.wait_running()
    await sandbox.kill()
    await sandbox.kill()  # idempotent, never raises
    assert sleep_marker.pids() == []
    assert not (local_settings.state_dir / "sandboxes" / "gone").exists()
    with pytest.raises(SandboxError, match="killed"):
        await sandbox.exec("true", timeout_s=5)


async def test_lifetime_kills_a_forgotten_sandbox(
    make_local_sandbox: MakeSandbox, sleep_marker: SleepMarker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("service.sandboxes.local.sandbox.LIFETIME_MARGIN_S", 0.0)
    sandbox = await make_local_sandbox(lifetime_s=0.5)
    process = await sandbox.spawn(sleep_marker.command)
    assert (await process.wait()).exit_code == -1
    assert sleep_marker.pids() == []


async def test_close_kills_every_sandbox(
    local_backend: LocalBackend, make_local_sandbox: MakeSandbox, sleep_marker: SleepMarker
) -> None:
    for rollout_id in ("a", "b"):
        sandbox = await make_local_sandbox(rollout_id)
        await sandbox.spawn(sleep_marker.command)
    await sleep_marker.wait_running()
    await local_backend.close()
    assert sleep_marker.pids() == []


async def test_bwrap_failure_is_a_sandbox_error(
    local_settings: Settings,
    make_local_sandbox: MakeSandbox,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prepare = LocalBackend._prepare

    def prepare_without_proxy_dir(
        self: LocalBackend,
        layout: SandboxLayout,
        key: WarmKey,
        image: None,
        layers: tuple[LocalSnapshot, ...],
    ) -> list[dict[str, Any]]:
        overlays = prepare(self, layout, key, image, layers)
        layout.proxy_dir.rmdir()  # bwrap cannot bind what is not there
        return overlays

    monkeypatch.setattr(LocalBackend, "_prepare", prepare_without_proxy_dir)
    with pytest.raises(SandboxError, match=r"failed to start: .*proxy"):
        await make_local_sandbox("broken")
    assert not (local_settings.state_dir / "sandboxes" / "broken").exists()


async def test_a_sandbox_whose_holder_died_refuses_commands(
    local_settings: Settings, local_sandbox: LocalSandbox
) -> None:
    home = str(local_sandbox.layout.home).encode()
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if Path(argv[0].decode()).name == "bwrap" and home in argv:
                os.kill(int(entry.name), signal.SIGKILL)
    with pytest.raises(SandboxError, match="is gone"):
        await _exec_until_refused(local_sandbox)


async def _exec_until_refused(sandbox: LocalSandbox) -> None:
    for _ in range(500):  # until the kernel has reaped the namespace
        await sandbox.exec("true", timeout_s=30)
        await asyncio.sleep(0.02)


async def test_missing_bwrap_names_the_package(
    local_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingDependencyError, match="apt-get install bubblewrap"):
        LocalBackend(local_settings)


_CRASHING_SERVER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from service.config import Settings
    from service.models import SandboxSpec
    from service.sandboxes.base import SandboxRequest
    from service.sandboxes.local.backend import LocalBackend

    async def main() -> None:
        state, command, *rollout_ids = sys.argv[1:]
        settings = Settings(
            state_dir=Path(state), cache_dir=Path(state).with_name("cache"), local_warm_sandboxes=0
        )
        backend = LocalBackend(settings)
        for rollout_id in rollout_ids:
            sandbox = await backend.create(SandboxRequest(rollout_id, SandboxSpec(), 600))
            await sandbox.spawn(command + " & " + command)
        print("ready", flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


async def _crash_a_server(state: Path, marker: SleepMarker, rollout_ids: list[str]) -> set[int]:
    """Run a server (another process) with sandboxes running `marker`, then SIGKILL it.

    Returns the pids of its fork server and spawners.
    """
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CRASHING_SERVER,
        str(state),
        marker.command,
        *rollout_ids,
        stdout=asyncio.subprocess.PIPE,
        cwd=Path(__file__).parents[3],
    )
    assert server.stdout is not None
    assert await server.stdout.readline() == b"ready\n"
    await marker.wait_running()
    forks = fork_processes()
    fork_server = {pid for pid, parent in forks.items() if parent == server.pid}
    server.kill()
    await server.wait()
    return fork_server | {pid for pid, parent in forks.items() if parent in fork_server}


async def test_a_crashed_server_leaves_no_process(
    tmp_path: Path, sleep_marker: SleepMarker
) -> None:
    state = tmp_path / "state"
    forks = await _crash_a_server(state, sleep_marker, ["crash"])
    assert len(forks) == 2  # the fork server and the sandbox's spawner
    assert await sleep_marker.wait_gone() == []  # --die-with-parent: the kernel kills them
    for _ in range(500):  # each exits when its socket to the dead server closes
        if not forks & fork_processes().keys():
            break
        await asyncio.sleep(0.02)
    assert not forks & fork_processes().keys()
    restarted = LocalBackend(Settings(state_dir=state, cache_dir=tmp_path / "cache"))
    assert await restarted.sweep_orphans(set()) == 1  # what the next start does


async def test_sweep_after_a_crash_removes_only_orphans(
    tmp_path: Path, sleep_marker: SleepMarker
) -> None:
    state = tmp_path / "state"
    await _crash_a_server(state, sleep_marker, ["orphan", "live"])
    restarted = LocalBackend(Settings(state_dir=state, cache_dir=tmp_path / "cache"))
    assert await restarted.sweep_orphans({"live"}) == 1
    assert [p.name for p in (state / "sandboxes").iterdir()] == ["live"]
    assert await restarted.sweep_orphans({"live"}) == 0  # counts cgroups too: none left
    assert await restarted.sweep_orphans(set()) == 1
    assert list((state / "sandboxes").iterdir()) == []
