"""A local sandbox writes to a filesystem of its own size: past it, ENOSPC; the host's
filesystem grows by the quota at most."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from service.config import Settings
from service.models import Resources, SandboxSpec
from service.sandboxes.base import WORKDIR, SandboxRequest
from service.sandboxes.local.backend import LocalBackend, LocalSandbox
from tests.e2e.processes import eventually
from tests.sandboxes.conftest import MakeSandbox

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="disk quotas need a root server")

_QUOTA_MB = 64
_MIB = 1024 * 1024


def _host_bytes(sandbox: LocalSandbox) -> int:
    """Bytes the sandbox's directory takes on the host's filesystem (du -x: the
    sandbox's own filesystem is not walked, its image is counted)."""
    done = subprocess.run(
        ["du", "-sx", "--block-size=1", str(sandbox.layout.root)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout.split()[0])


async def test_writing_past_the_quota_is_enospc(make_local_sandbox: MakeSandbox) -> None:
    sandbox = await make_local_sandbox(resources=Resources(disk_mb=_QUOTA_MB))
    fill = await sandbox.exec(
        "head -c 40M /dev/zero > a.bin; echo home=$?; "
        "head -c 40M /dev/zero > /tmp/b.bin; echo tmp=$?; "
        "head -c 200M /dev/urandom > c.bin; echo more=$?",
        timeout_s=120,
    )
    assert fill.stdout.splitlines() == ["home=0", "tmp=1", "more=1"], fill.stderr
    assert "No space left on device" in fill.stderr
    written = _host_bytes(sandbox)
    assert written <= (_QUOTA_MB + 1) * _MIB, written
    print(f"\ndisk written by a sandbox at its {_QUOTA_MB} MiB quota: {written / _MIB:.1f} MiB")
    await sandbox.kill()
    assert not sandbox.layout.root.exists()


async def test_staged_files_count_against_the_quota(make_local_sandbox: MakeSandbox) -> None:
    sandbox = await make_local_sandbox(resources=Resources(disk_mb=_QUOTA_MB))
    await sandbox.write_files({f"{WORKDIR}/big.bin": b"x" * (50 * _MIB)})
    result = await sandbox.exec("head -c 20M /dev/zero > more.bin", timeout_s=60)
    assert result.exit_code != 0
    assert "No space left on device" in result.stderr
    await sandbox.kill()


async def test_the_default_quota_applies_when_the_spec_sets_none(
    make_local_sandbox: MakeSandbox,
) -> None:
    sandbox = await make_local_sandbox()
    result = await sandbox.exec("df --output=size -B1M /tmp ~ | tail -n 2", timeout_s=30)
    sizes = [int(line) for line in result.stdout.split()]
    assert len(sizes) == 2
    assert sizes[0] == sizes[1]  # one filesystem for both
    assert 3900 <= sizes[0] <= 4096  # the 4 GiB default, less ext4's own metadata
    await sandbox.kill()


def _loop_images() -> list[str]:
    """The image file behind every attached loop device."""
    images = []
    for path in Path("/sys/block").glob("loop*/loop/backing_file"):
        with contextlib.suppress(FileNotFoundError):  # detached while we looked
            images.append(path.read_text().strip())
    return images


async def test_a_sandbox_holds_no_copy_of_another_sandboxs_disk(
    make_local_sandbox: MakeSandbox, local_settings: Settings, tmp_path: Path
) -> None:
    """Else a sibling's teardown could fail this sandbox's bwrap, and this sandbox would
    keep the sibling's filesystem (and its image's blocks) alive after its teardown;
    siblings of another server on the host included."""
    first = await make_local_sandbox("first")
    other_server = LocalBackend(local_settings.model_copy(update={"state_dir": tmp_path / "b"}))
    try:
        second = await make_local_sandbox("second")
        third = await other_server.create(SandboxRequest("third", SandboxSpec(), 300))
        for sandbox in (second, third):
            mounts = await sandbox.exec("cat /proc/self/mountinfo", timeout_s=30)
            assert str(sandbox.layout.disk) in mounts.stdout  # its own, under home and /tmp
            assert str(first.layout.root) not in mounts.stdout
        image = first.layout.disk_image
        await first.kill()
        # Freed (the kernel lets go of a loop device a moment later), though the others live.
        await eventually(lambda: str(image) not in _loop_images())
    finally:
        await other_server.close()


async def test_no_default_quota_leaves_plain_directories(
    local_settings: Settings,
) -> None:
    """ROLLOUT_SANDBOX_DISK_MB=0: no filesystem of its own unless the spec asks for one."""
    backend = LocalBackend(local_settings.model_copy(update={"sandbox_disk_mb": 0}))
    try:
        plain = await backend.create(SandboxRequest("plain", SandboxSpec(), 300))
        asked = await backend.create(
            SandboxRequest("asked", SandboxSpec(resources=Resources(disk_mb=_QUOTA_MB)), 300)
        )
        assert not os.path.ismount(plain.layout.disk)
        assert os.path.ismount(asked.layout.disk)
    finally:
        await backend.close()
