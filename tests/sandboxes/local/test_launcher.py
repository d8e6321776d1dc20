"""The command launcher (`local.launcher.c`) and the forked Python it replaces.

Every command a spawner starts goes through the compiled launcher when the host has a C
compiler, through a fork of the spawner's own Python otherwise: each check below runs
both ways, on a host-root sandbox and (as root) on an image sandbox, whose commands enter
a user namespace with a seccomp filter of their own.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from service.config import Settings
from service.images import Image
from service.models import SandboxSpec
from service.sandboxes.base import WORKDIR, SandboxRequest
from service.sandboxes.local import spawner
from service.sandboxes.local.backend import LocalBackend, LocalSandbox
from service.sandboxes.local.launcher import Launcher
from service.sandboxes.local.launcher_build import build_launcher
from service.sandboxes.local.limits import Limits
from tests.sandboxes.conftest import fork_processes

_CAP_SYS_RESOURCE = 24
_GLIBC_OWN_SIGNALS = (1 << 31) | (1 << 32)  # 32 and 33: glibc's, out of Python's reach
_needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server")


@pytest.fixture(params=["launcher", "forked-python"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "forked-python":
        monkeypatch.setattr(spawner, "build_launcher", lambda cache_dir: None)
    return str(request.param)


@pytest.fixture
async def backend(tmp_path: Path, mode: str) -> AsyncIterator[LocalBackend]:
    settings = Settings(
        state_dir=tmp_path / "state", cache_dir=tmp_path / "cache", local_warm_sandboxes=0
    )
    local = LocalBackend(settings)
    yield local
    await local.close()


@pytest.fixture
async def image_backend(
    tmp_path: Path, mode: str, base_image: Image
) -> AsyncIterator[LocalBackend]:
    settings = Settings(
        state_dir=tmp_path / "state", sandbox_image="rollout/base", local_warm_sandboxes=0
    )
    local = LocalBackend(settings)
    yield local
    await local.close()


async def _sandbox(backend: LocalBackend, name: str = "launch") -> LocalSandbox:
    return await backend.create(SandboxRequest(name, SandboxSpec(), lifetime_s=120))


def _fork_server_argv() -> list[str]:
    [server] = [pid for pid, parent in fork_processes().items() if parent == os.getpid()]
    return Path(f"/proc/{server}/cmdline").read_bytes().decode().split("\0")[:-1]


async def test_the_fork_server_is_handed_the_launcher_only_when_one_was_built(
    backend: LocalBackend, mode: str, tmp_path: Path
) -> None:
    sandbox = await _sandbox(backend)
    argv = _fork_server_argv()
    built = sorted((tmp_path / "cache" / "launcher").glob("*.so"))
    if mode == "launcher":
        assert [str(path) for path in built] == argv[-1:]
    else:
        assert built == []
        assert argv[-1].isdigit()  # the socket's descriptor, nothing after it
    assert (await sandbox.exec("echo started", timeout_s=30)).stdout == "started\n"
    await sandbox.kill()


async def test_a_launcher_that_cannot_be_loaded_leaves_commands_to_the_fork(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    built = build_launcher(tmp_path / "cache")
    assert built is not None
    Path(built).write_bytes(b"not a shared library")
    settings = Settings(
        state_dir=tmp_path / "state", cache_dir=tmp_path / "cache", local_warm_sandboxes=0
    )
    backend = LocalBackend(settings)
    try:
        sandbox = await _sandbox(backend)
        assert _fork_server_argv()[-1] == built
        assert (await sandbox.exec("echo forked", timeout_s=30)).stdout == "forked\n"
        await sandbox.kill()
    finally:
        await backend.close()
    assert f"commands fork instead of {built}" in capfd.readouterr().err


async def test_a_command_has_the_sandbox_limits_and_default_signals(
    backend: LocalBackend,
) -> None:
    sandbox = await _sandbox(backend)
    limits = Limits.resolve(SandboxSpec().resources, Settings())
    result = await sandbox.exec(
        "ulimit -u; ulimit -f; grep -E '^Sig(Ign|Blk|Cgt):' /proc/self/status; "
        "ps -o sid= -p $$; echo $$",
        timeout_s=30,
    )
    processes, file_blocks, *masks, session, shell = result.stdout.split("\n")[:-1]
    assert int(processes) == limits.max_processes
    assert int(file_blocks) * 1024 == limits.max_file_bytes  # bash counts 1024-byte blocks
    states = dict(line.split(":\t") for line in masks)
    assert int(states["SigBlk"], 16) == 0
    assert int(states["SigIgn"], 16) & ~_GLIBC_OWN_SIGNALS == 0
    assert session.strip() == shell  # the command leads a session of its own
    await sandbox.kill()


@pytest.mark.skipif(os.geteuid() != 0, reason="privileges drop only when the server is root")
async def test_a_command_takes_the_sandbox_uid_and_its_own_tag(backend: LocalBackend) -> None:
    sandbox = await _sandbox(backend)
    first = await sandbox.exec("id -u; id -g; id -G; grep CapBnd /proc/self/status", timeout_s=30)
    second = await sandbox.exec("id -G", timeout_s=30)
    uid, gid, groups, bounding = first.stdout.splitlines()
    assert uid == gid != "0"
    primary, tag = groups.split()
    assert primary == gid
    assert second.stdout.split() == [gid, str(int(tag) + 1)]
    assert int(bounding.split()[1], 16) == 0
    await sandbox.kill()


async def test_a_failure_before_exec_is_the_commands_own_exit(backend: LocalBackend) -> None:
    sandbox = await _sandbox(backend)
    missing = await sandbox.spawn("true", env={"PATH": "/nowhere"})
    result = await missing.wait()
    assert result.exit_code == 127
    assert result.stderr.startswith("rollout sandbox: cannot start bash: ")
    await sandbox.exec(f"rm -rf {WORKDIR}", timeout_s=30)
    gone = await sandbox.exec("true", timeout_s=30)
    assert gone.exit_code == 127
    assert gone.stderr.startswith("rollout sandbox: cannot start bash: ")
    assert WORKDIR in gone.stderr
    assert "No such file or directory" in gone.stderr
    await sandbox.kill()


@_needs_root
async def test_an_image_command_is_root_of_its_user_namespace_under_its_filter(
    image_backend: LocalBackend,
) -> None:
    sandbox = await _sandbox(image_backend, "image")
    result = await sandbox.exec(
        "id -u; grep CapBnd /proc/self/status; grep Seccomp: /proc/self/status; "
        "readlink /proc/self/ns/user; unshare -U true; echo unshare $?",
        timeout_s=30,
    )
    uid, bounding, seccomp, namespace, unshare = result.stdout.splitlines()
    assert uid == "0"
    assert not int(bounding.split()[1], 16) & (1 << _CAP_SYS_RESOURCE)
    assert seccomp.split()[1] == "2"  # filtered
    assert namespace != os.readlink("/proc/self/ns/user")
    assert unshare != "unshare 0"
    await sandbox.kill()


def test_a_host_without_a_compiler_is_told_and_builds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with caplog.at_level(logging.WARNING):
        assert build_launcher(tmp_path / "cache") is None
    assert "no C compiler" in caplog.text
    assert "no-such-cc" in caplog.text
    assert not (tmp_path / "cache" / "launcher").exists()


def test_a_built_launcher_is_reused_and_a_failed_build_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    broken = tmp_path / "broken-cc"
    broken.write_text("#!/bin/sh\necho 'broken-cc: cannot compile' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("CC", str(broken))
    with caplog.at_level(logging.WARNING):
        assert build_launcher(tmp_path / "cache") is None
    assert "broken-cc: cannot compile" in caplog.text
    assert list((tmp_path / "cache" / "launcher").iterdir()) == []
    monkeypatch.delenv("CC")
    built = build_launcher(tmp_path / "cache")
    assert built is not None
    monkeypatch.setenv("CC", str(broken))  # a cached build needs no compiler
    assert build_launcher(tmp_path / "cache") == built


def test_the_launcher_does_not_wait_for_a_childs_exec(tmp_path: Path) -> None:
    """A child held before its exec (here: writing its error to a full pipe; in a sandbox,
    SIGSTOPped by a process of the same uid) must not hold the spawner that launched it."""
    path = build_launcher(tmp_path / "cache")
    assert path is not None
    launcher = Launcher(path)
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(write_end, b"x" * 4096)
    os.set_blocking(write_end, True)  # the child's error line now blocks, before its exec
    devnull = os.open(os.devnull, os.O_RDONLY)
    with ThreadPoolExecutor(1) as pool:
        launching = pool.submit(
            launcher.launch,
            "/bin/true",
            ["true"],
            {},
            str(tmp_path / "missing"),
            (devnull, devnull, write_end),
            [],
            uid=None,
            groups=[],
            user_namespace=-1,
            seccomp_program=None,
        )
        try:
            pid = launching.result(timeout=10)  # a launcher waiting for the exec: never
        finally:
            os.close(write_end)
            os.close(devnull)
            drained = b""  # lets the child go on (and a waiting launcher return)
            while chunk := os.read(read_end, 65536):
                drained += chunk
            os.close(read_end)
    _, status = os.waitpid(pid, 0)
    launcher.exited(pid)
    assert os.waitstatus_to_exitcode(status) == 127
    assert drained.lstrip(b"x").startswith(b"rollout sandbox: cannot start true: ")


async def _cannot_replace(sandbox: LocalSandbox, built: str) -> None:
    """Neither overwriting nor removing the library, nor putting another beside it."""
    before = Path(built).read_bytes()
    planted = Path(built).with_name("planted.so")
    result = await sandbox.exec(
        f"echo x > {built}; echo $?; echo x > {planted}; echo $?; rm -f {built}; echo $?",
        timeout_s=30,
    )
    await sandbox.kill()
    assert "0" not in result.stdout.split(), result.stdout
    assert Path(built).read_bytes() == before
    assert not planted.exists()


async def test_no_sandbox_can_replace_the_launcher_its_spawner_loads(
    backend: LocalBackend, tmp_path: Path
) -> None:
    """The library a root fork server loads lies in the cache, which sandboxes see, bound
    read-only: the sandbox uid cannot change it."""
    built = build_launcher(tmp_path / "cache")
    assert built is not None
    await _cannot_replace(await _sandbox(backend), built)


@_needs_root
async def test_root_of_an_image_sandbox_cannot_replace_the_launcher(
    image_backend: LocalBackend,
) -> None:
    built = build_launcher(Settings().cache_dir)
    assert built is not None
    await _cannot_replace(await _sandbox(image_backend, "image"), built)
