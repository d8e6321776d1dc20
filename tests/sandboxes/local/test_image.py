"""A local sandbox on an image: the image's root, root inside, nothing of the host.

Real bwrap on the Debian base of the server's shared cache (built once per machine, see
tests/images/conftest.py). On main these fail: a sandbox runs on the host's root, read-only,
as an unprivileged uid, so the markers below are readable, /usr/local is read-only and
files outside HOME and /tmp cannot be written.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.config import Settings
from service.errors import SpecError
from service.images import Image
from service.models import Resources, SandboxSpec
from service.sandboxes.base import SandboxRequest
from service.sandboxes.local.backend import LocalBackend, LocalSandbox
from service.sandboxes.local.mounts import DISK_POOL, mount_points_below

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server")


@pytest.fixture
async def backend(tmp_path: Path, base_image: Image) -> AsyncIterator[LocalBackend]:
    settings = Settings(
        state_dir=tmp_path / "state",
        sandbox_image="rollout/base",
        local_warm_sandboxes=0,
    )
    local = LocalBackend(settings)
    yield local
    await local.close()


async def _sandbox(backend: LocalBackend, name: str, image: str = "") -> LocalSandbox:
    request = SandboxRequest(name, SandboxSpec(image=image), lifetime_s=120)
    return await backend.create(request)


async def _run(sandbox: LocalSandbox, command: str) -> str:
    result = await sandbox.exec(command, timeout_s=60)
    assert result.exit_code == 0, (command, result.stdout, result.stderr)
    return result.stdout


async def test_root_inside_can_change_the_system(backend: LocalBackend) -> None:
    sandbox = await _sandbox(backend, "root")
    out = await _run(
        sandbox,
        "id -u; echo tool > /usr/local/bin/tool && chmod +x /usr/local/bin/tool; "
        "chown 42:65534 /usr/local/bin/tool; stat -c '%U:%G' /usr/local/bin/tool; "
        "dpkg-query -W -f='${Status}\\n' python3; cat /etc/debian_version >/dev/null",
    )
    assert out.splitlines() == ["0", "_apt:nogroup", "install ok installed"]


async def test_host_files_are_not_there(backend: LocalBackend) -> None:
    marker = f"rollout-marker-{uuid.uuid4().hex}"
    planted = [Path("/srv") / marker, Path("/opt") / marker]
    for path in planted:
        path.write_text("host secret\n")
    try:
        sandbox = await _sandbox(backend, "isolated")
        out = await _run(
            sandbox,
            f"cat /srv/{marker} /opt/{marker} 2>/dev/null; ls / /srv /opt; cat /etc/hostname; "
            "test -e /etc/machine-id && cat /etc/machine-id; true",
        )
    finally:
        for path in planted:
            path.unlink()
    assert "host secret" not in out
    assert marker not in out
    assert "sandbox" in out.splitlines()
    host_name = Path("/etc/hostname").read_text().strip()
    assert host_name == "sandbox" or host_name not in out.split()
    host_machine = Path("/etc/machine-id").read_text().strip()
    assert host_machine not in out


async def test_files_at_absolute_paths(backend: LocalBackend) -> None:
    sandbox = await _sandbox(backend, "files")
    await sandbox.write_files({"/app/main.py": b"print('hi')\n", "/tests/test.sh": b"exit 0\n"})
    out = await _run(sandbox, "stat -c '%U %a' /app/main.py; python3 /app/main.py; cat /tests/*")
    assert out.splitlines() == ["root 644", "hi", "exit 0"]
    await _run(sandbox, "mkdir -p /logs/verifier && echo 0.5 > /logs/verifier/reward.txt")
    assert await sandbox.read_file("/logs/verifier/reward.txt", max_bytes=64) == b"0.5\n"
    listed = await sandbox.list_files("/app", max_entries=10)
    assert [entry.path for entry in listed] == ["main.py"]
    reclaimed = await sandbox.reclaim(remove=["/tests"], empty_dirs=["/logs/verifier"])
    assert reclaimed.removed == ("/tests", "/logs/verifier")
    assert await _run(sandbox, "ls -A /logs/verifier; test ! -e /tests && echo gone") == "gone\n"


async def test_writes_never_reach_the_image(backend: LocalBackend, base_image: Image) -> None:
    first = await _sandbox(backend, "first")
    await _run(first, "echo dirty > /usr/bin/dirty; rm /etc/debian_version; echo x >> /etc/passwd")
    second = await _sandbox(backend, "second")
    out = await _run(
        second, "ls /usr/bin/dirty 2>&1; cat /etc/debian_version; tail -c 2 /etc/passwd"
    )
    assert "No such file" in out
    assert "x\n" not in out.splitlines()[-1]
    assert not (base_image.rootfs / "usr/bin/dirty").exists()
    assert (base_image.rootfs / "etc/debian_version").exists()


async def test_sandboxes_own_distinct_host_ids(backend: LocalBackend) -> None:
    maps = []
    for name in ("ids-a", "ids-b"):
        sandbox = await _sandbox(backend, name)
        maps.append((await _run(sandbox, "cat /proc/self/uid_map")).split())
    (inside_a, host_a, span_a), (inside_b, host_b, span_b) = maps
    assert inside_a == inside_b == "0"
    assert span_a == span_b == "65536"
    assert int(host_a) > 0
    assert int(host_b) > 0
    assert abs(int(host_a) - int(host_b)) >= 65536


async def test_no_new_namespaces_inside(backend: LocalBackend) -> None:
    sandbox = await _sandbox(backend, "namespaces")
    probe = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "fd = os.open('/proc/self/ns/net', os.O_RDONLY)\n"
        "print(libc.setns(fd, 0), ctypes.get_errno())\n"
        "print(libc.unshare(0x20000), ctypes.get_errno())\n"
    )
    await sandbox.write_files({"/tmp/probe.py": probe.encode()})
    out = await _run(sandbox, "python3 /tmp/probe.py; unshare -r true 2>&1 || echo refused")
    assert out.splitlines()[:2] == ["-1 1", "-1 1"]
    assert "refused" in out


def _mounts_naming(path: Path) -> list[str]:
    """Mounts of any process's namespace whose line names `path` (an overlay's layers)."""
    found = []
    for mountinfo in Path("/proc").glob("[0-9]*/mountinfo"):
        try:
            found += [line for line in mountinfo.read_text().splitlines() if str(path) in line]
        except OSError:
            continue  # the process exited
    return found


async def test_kill_leaves_no_mount_or_directory(backend: LocalBackend, tmp_path: Path) -> None:
    sandbox = await _sandbox(backend, "gone")
    await _run(sandbox, "echo data > /var/data")
    assert _mounts_naming(tmp_path / "state" / "sandboxes" / "gone")  # the overlay, somewhere
    await sandbox.kill()
    await backend.reaped()
    assert not (tmp_path / "state" / "sandboxes" / "gone").exists()
    pooled = str(tmp_path / "state" / DISK_POOL)  # wiped disks kept for the next sandboxes
    assert [
        p for p in mount_points_below(str(tmp_path / "state")) if not p.startswith(pooled)
    ] == []
    assert _mounts_naming(tmp_path / "state" / "sandboxes" / "gone") == []


async def test_host_name_keeps_the_host_root(backend: LocalBackend) -> None:
    sandbox = await _sandbox(backend, "host", image="host")
    out = await _run(sandbox, "id -u; test -w /usr/local && echo writable || echo read-only")
    assert out.splitlines()[0] != "0"
    assert out.splitlines()[1] == "read-only"


async def test_unknown_image_is_refused_naming_the_field(backend: LocalBackend) -> None:
    with pytest.raises(SpecError) as raised:
        await backend.check_spec(SandboxSpec(image=f"nowhere/{uuid.uuid4().hex}"))
    (violation,) = raised.value.violations
    assert violation.field == "spec.sandbox.image"
    assert "python -m service.images" in violation.description
    await backend.check_spec(SandboxSpec(image="debian:bookworm"))  # made at first use
    await backend.check_spec(SandboxSpec(image="host"))


async def test_the_sandboxs_disk_bounds_what_it_changes(backend: LocalBackend) -> None:
    spec = SandboxSpec(resources=Resources(disk_mb=64))
    sandbox = await backend.create(SandboxRequest("small", spec, lifetime_s=120))
    result = await sandbox.exec("head -c 100M /dev/zero > /usr/local/big", timeout_s=60)
    assert result.exit_code != 0
    assert "No space left on device" in result.stderr


async def test_a_warm_sandbox_on_the_image_is_claimed(tmp_path: Path, base_image: Image) -> None:
    settings = Settings(
        state_dir=tmp_path / "state", sandbox_image="rollout/base", local_warm_sandboxes=1
    )
    backend = LocalBackend(settings)
    try:
        await backend.warm_up()
        (warm,) = (tmp_path / "state" / "sandboxes").iterdir()
        sandbox = await _sandbox(backend, "claimed")
        assert not warm.exists()  # renamed to the rollout's
        await sandbox.write_files({"/app/x": b"staged\n"})
        assert await _run(sandbox, "id -u; cat /app/x") == "0\nstaged\n"
        assert sandbox.layout.root == tmp_path / "state" / "sandboxes" / "claimed"
    finally:
        await backend.close()


async def test_the_kernels_trees_are_no_files_to_write(backend: LocalBackend) -> None:
    sandbox = await _sandbox(backend, "kernel")
    for path in ("/proc/sys/kernel/hostname", "/sys/kernel/x", "/dev/shm/x"):
        with pytest.raises(ValueError, match="not a file tree"):
            await sandbox.write_files({path: b"host\n"})
    assert Path("/proc/sys/kernel/hostname").read_text() != "host\n"


_TAKE_INOTIFY = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
held = 0
while held < 1000 and libc.inotify_init1(0) >= 0:
    held += 1
print(held, flush=True)
if sys.argv[1:] == ["hold"] and os.fork() == 0:  # holds them until teardown
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.execvp("sleep", ["sleep", "600"])
"""


async def test_a_sandbox_gets_only_its_share_of_inotify_instances(backend: LocalBackend) -> None:
    """An image sandbox's user namespace is root's: its inotify instances are counted in
    root's pool (per uid, up the user namespaces). One taking all it can, and holding them,
    gets its share (`user_counts`), another its own, root some still; and root inside
    cannot raise its namespace's limit (it has no CAP_SYS_RESOURCE)."""
    pool = int(Path("/proc/sys/user/max_inotify_instances").read_text())
    share = pool // (Settings().max_running + 1)
    counts = []
    for name in ("inotify-a", "inotify-b"):
        sandbox = await _sandbox(backend, name)
        await sandbox.write_files({"/tmp/take.py": _TAKE_INOTIFY.encode()})
        counts.append(int(await _run(sandbox, "python3 /tmp/take.py hold")))
    raised = await _run(sandbox, "(echo 1000 > /proc/sys/user/max_inotify_instances) 2>&1; true")
    command = [sys.executable, "-c", _TAKE_INOTIFY]
    probe = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
    assert counts == [share, share]
    assert "Permission denied" in raised
    assert int(probe.stdout) > 0  # root's own, while both sandboxes hold theirs
