"""Set up once, start many: a local sandbox snapshotted, and sandboxes started from it.

Real bwrap, on the host's root and on the Debian base. On main there is no snapshot: a
group's members got a tar of the template's HOME and /tmp unpacked into each, and nothing
setup wrote elsewhere on an image's root.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.config import Settings
from service.errors import SandboxError
from service.images import ImageStore
from service.models import SandboxSpec
from service.sandboxes.base import WORKDIR, SandboxRequest
from service.sandboxes.local.backend import LocalBackend, LocalSandbox
from service.sandboxes.local.mounts import DISK_POOL, mount_points_below
from service.sandboxes.local.snapshot import LocalSnapshot

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="snapshots need a root server")

_IMAGES = ["host", "rollout/base"]


@pytest.fixture(scope="module", autouse=True)
def base_image() -> None:
    asyncio.run(ImageStore(Settings().cache_dir).base())


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[LocalBackend]:
    local = LocalBackend(Settings(state_dir=tmp_path / "state", local_warm_sandboxes=0))
    yield local
    await local.close()


async def _create(
    backend: LocalBackend, name: str, image: str, snapshot: LocalSnapshot | None = None
) -> LocalSandbox:
    request = SandboxRequest(name, SandboxSpec(image=image), lifetime_s=120, snapshot=snapshot)
    return await backend.create(request)


async def _run(sandbox: LocalSandbox, command: str) -> str:
    result = await sandbox.exec(command, timeout_s=60)
    assert result.exit_code == 0, (command, result.stdout, result.stderr)
    return result.stdout


async def _template(backend: LocalBackend, image: str) -> LocalSnapshot:
    template = await _create(backend, "template", image)
    await template.write_files({f"{WORKDIR}/staged.txt": b"staged\n"})
    await _run(
        template,
        "echo set-up > made.txt && mkdir -p ~/.cache/tool && echo cached > ~/.cache/tool/c "
        "&& echo scratch > /tmp/scratch && echo doomed > doomed.txt && rm doomed.txt",
    )
    await template.reclaim()
    snapshot = await backend.snapshot(template)
    await template.kill()
    return snapshot


@pytest.mark.parametrize("image", _IMAGES)
async def test_members_start_from_the_snapshot_and_write_only_their_own(
    backend: LocalBackend, image: str
) -> None:
    snapshot = await _template(backend, image)
    layer = sorted(str(p.relative_to(snapshot.directory)) for p in snapshot.directory.rglob("*"))
    first, second = [await _create(backend, f"member-{i}", image, snapshot) for i in range(2)]
    seen = "cat staged.txt made.txt ~/.cache/tool/c /tmp/scratch; ls; stat -c %u ~/.cache/tool/c"
    for member in (first, second):
        lines = (await _run(member, f"{seen}; id -u")).splitlines()
        assert lines[:4] == ["staged", "set-up", "cached", "scratch"]
        assert sorted(lines[4:-2]) == ["made.txt", "staged.txt"]
        assert lines[-2] == lines[-1]  # the setup's files are the member's own user's
    await _run(first, "echo first >> made.txt && rm staged.txt /tmp/scratch && echo new > new.txt")
    await first.write_files({"/tmp/from-server": b"written\n"})
    assert await first.read_file(f"{WORKDIR}/made.txt", max_bytes=100) == b"set-up\nfirst\n"
    assert await first.read_file("/tmp/from-server", max_bytes=100) == b"written\n"
    assert await second.read_file(f"{WORKDIR}/made.txt", max_bytes=100) == b"set-up\n"
    seen_by_second = "ls; cat /tmp/scratch; test -e /tmp/from-server && echo seen || echo own"
    assert (await _run(second, seen_by_second)).split() == [
        *("made.txt", "staged.txt", "scratch"),
        "own",
    ]
    after = sorted(str(p.relative_to(snapshot.directory)) for p in snapshot.directory.rglob("*"))
    assert after == layer  # no member wrote into the layer
    [made] = snapshot.directory.rglob("made.txt")
    assert made.read_text() == "set-up\n"
    for member in (first, second):
        await member.kill()
    await snapshot.release()


@pytest.mark.parametrize("image", _IMAGES)
async def test_nothing_is_left_and_a_released_snapshot_starts_nothing(
    backend: LocalBackend, image: str, tmp_path: Path
) -> None:
    snapshot = await _template(backend, image)
    member = await _create(backend, "member", image, snapshot)
    await _run(member, "sleep 30 & echo started")
    await member.kill()
    await backend.reaped()
    state = tmp_path / "state"
    pooled = str(state / DISK_POOL)  # wiped disks kept for the next sandboxes (`disk_pool`)
    assert [p for p in mount_points_below(str(state)) if not p.startswith(pooled)] == []
    assert not (state / "sandboxes" / "member").exists()
    await snapshot.release()
    assert not snapshot.directory.exists()
    with pytest.raises(SandboxError, match="released"):
        await _create(backend, "late", image, snapshot)


async def test_a_snapshot_starts_sandboxes_of_its_own_image_only(backend: LocalBackend) -> None:
    snapshot = await _template(backend, "host")
    with pytest.raises(SandboxError, match="another image"):
        await _create(backend, "member", "rollout/base", snapshot)
    await snapshot.release()


async def test_the_start_up_sweep_removes_snapshots_no_group_holds(
    backend: LocalBackend, tmp_path: Path
) -> None:
    held = await _template(backend, "host")
    crashed = tmp_path / "state" / "snapshots" / "g-crashed-template"
    (crashed / "home").mkdir(parents=True)
    (crashed / "home" / "file").write_text("left by a crashed server\n")
    await backend.sweep_orphans(set())
    assert not crashed.exists()
    assert held.directory.is_dir()
    await held.release()


async def test_a_snapshot_cancelled_mid_copy_leaves_no_layer(
    backend: LocalBackend, tmp_path: Path
) -> None:
    template = await _create(backend, "template", "host")
    await _run(template, "mkdir many && for i in $(seq 2000); do echo $i > many/$i; done")
    await template.reclaim()
    taking = asyncio.ensure_future(backend.snapshot(template))
    await asyncio.sleep(0)  # the copy has started in its thread
    taking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await taking
    assert list((tmp_path / "state" / "snapshots").iterdir()) == []
    await template.kill()
