"""A build killed with its process (a server killed mid-build) leaves buildah's working
container behind: the store's next first use in a process sweeps it, never while another
process builds.

The builds run on a store of their own, on a tiny image made here (the host's dash, sleep and
libc), so no Debian base is needed: root's store and a rootless one (as an unprivileged
server's, run here by root)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.images import ImageStore
from service.images.base import remove_scratch
from tests.images.layouts import make_layout

pytestmark = pytest.mark.timeout(600)

_WAIT_S = 300.0
_BUILD = """\
import asyncio, sys
from pathlib import Path
from service.images import ImageStore
from service.images.base import remove_scratch
from tests.images.layouts import make_layout
cache, rootless, context, name = sys.argv[1:]
store = ImageStore(Path(cache), rootless=Path(rootless) if rootless else None)
asyncio.run(store.build(Path(context), name))
"""
_LIBS = ("/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2")


@pytest.fixture
def mini_layout(tmp_path: Path) -> Path:
    """An OCI layout (`<dir>:mini`) holding /bin/sh and /bin/sleep with the libc they need."""
    if not all(Path(lib).exists() for lib in _LIBS):
        pytest.skip("the tiny image copies an x86_64 glibc")

    def fill(rootfs: Path) -> None:
        for source, target in [("/bin/dash", "bin/sh"), ("/bin/sleep", "bin/sleep")] + [
            (lib, lib.lstrip("/")) for lib in _LIBS
        ]:
            (rootfs / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, rootfs / target)

    return make_layout(tmp_path, "mini", fill)


def _children() -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            found.setdefault(parent, []).append(int(entry))
    return found


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (the image tools run in sessions of their own)."""
    children, tree = _children(), [pid]
    for member in tree:
        tree.extend(children.get(member, []))
    return tree


def _command(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []


class _Build:
    """A build of `RUN sleep 300` in a process of its own, like a server's."""

    def __init__(self, store: ImageStore, rootless: Path | None, context: Path, name: str):
        context.mkdir()
        (context / "Dockerfile").write_text(f"FROM tests/mini\nRUN sleep 300 # {name}\n")
        argv = [sys.executable, "-c", _BUILD, str(store.shared.parent), str(rootless or "")]
        self.process = subprocess.Popen(
            [*argv, str(context), name],
            cwd=Path(__file__).parents[2],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

    def wait_running(self) -> None:
        """Until the RUN step's sleep runs (its container made)."""
        deadline = time.monotonic() + _WAIT_S
        while not any(_command(pid)[:2] == ["sleep", "300"] for pid in _tree(self.process.pid)):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                output = self.process.communicate()[0].decode(errors="replace")
                pytest.fail(f"the build never reached its RUN step:\n{output}")
            time.sleep(0.2)

    def alive(self) -> bool:
        return self.process.poll() is None and any(
            _command(pid)[:2] == ["sleep", "300"] for pid in _tree(self.process.pid)
        )

    def kill(self) -> None:
        """SIGKILL the process and every tool it runs, as a server's unit is killed."""
        for pid in _tree(self.process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait()


async def _containers(store: ImageStore) -> set[str]:
    listed = await store.storage.query("containers", "--json")
    return {container["id"] for container in listed or []}


def _mounts_below(directory: Path) -> list[str]:
    with open("/proc/self/mountinfo") as mountinfo:
        points = [line.split()[4] for line in mountinfo]
    return [point for point in points if point.startswith(f"{directory}/")]


@pytest.fixture(params=["root", "rootless"])
def rootless(request: pytest.FixtureRequest, tmp_path: Path) -> Path | None:
    return tmp_path / "rootless" if request.param == "rootless" else None


@pytest.fixture
async def builds(
    tmp_path: Path, rootless: Path | None
) -> AsyncIterator[tuple[ImageStore, list[_Build]]]:
    """A store of its own and the builds started on it: killed at the end whatever happened,
    then pruned, so that no container of theirs stays mounted."""
    store = ImageStore(tmp_path / "cache", rootless=rootless)
    started: list[_Build] = []
    yield store, started
    for build in started:
        build.kill()
    await store.prune(everything=True)


async def test_a_killed_builds_container_is_swept_but_never_a_running_ones(
    tmp_path: Path,
    mini_layout: Path,
    rootless: Path | None,
    builds: tuple[ImageStore, list[_Build]],
) -> None:
    store, started = builds
    cache = store.shared.parent
    await store.import_oci(f"oci:{mini_layout}:mini", "tests/mini")

    killed = _Build(store, rootless, tmp_path / "killed", "tests/killed")
    started.append(killed)
    await asyncio.to_thread(killed.wait_running)
    killed.kill()
    left = await _containers(store)
    assert left, "the killed build left no working container: nothing to sweep"

    running = _Build(store, rootless, tmp_path / "running", "tests/running")
    started.append(running)
    await asyncio.to_thread(running.wait_running)
    running_containers = await _containers(store) - left
    assert running_containers

    # A server starting while the other build runs: its first use sweeps nothing.
    await ImageStore(cache, rootless=rootless).get("tests/mini")
    assert running.alive()
    assert running_containers <= await _containers(store)

    # That build killed too, the next server's first use sweeps both builds' leftovers.
    running.kill()
    starting = ImageStore(cache, rootless=rootless)
    await starting.get("tests/mini")
    assert await _containers(starting) == set()
    assert not (starting.directory / "dockerfiles").exists()
    assert _mounts_below(starting.directory) == []


def test_a_killed_base_builds_scratch_is_removed_but_never_what_is_mounted_in_it(
    tmp_path: Path,
) -> None:
    """mmdebstrap killed mid-run leaves the host's /dev/shm bind-mounted in its target: a
    tmpfs stands for it here; its files stay, the rest goes."""
    scratch = tmp_path / "base-scratch"
    shm = scratch / "rootfs" / "dev" / "shm"
    shm.mkdir(parents=True)
    (scratch / "rootfs" / "etc").mkdir()
    (scratch / "rootfs" / "etc" / "hostname").write_text("sandbox\n")
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(shm)], check=True)
    try:
        (shm / "segment").write_text("the host's\n")
        remove_scratch(scratch)
        assert (shm / "segment").read_text() == "the host's\n"
        assert not (scratch / "rootfs" / "etc").exists()
    finally:
        subprocess.run(["umount", "--lazy", str(shm)], check=True)
    remove_scratch(scratch)
    assert not scratch.exists()
