"""A spawner's mount namespace holds no other sandbox's disk, even when a sibling's teardown
moves that disk aside while the spawner is leaving it (the race that failed a group's
template on the host's root: bwrap's bind of / met a sibling's disk whose mount point went)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from service.sandboxes.local.mounts import SANDBOX_DISK, detach

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")

# Run in a process of its own: leave_other_disks unshares its caller's mount namespace.
# The sibling's directory is renamed (as `reaper` moves it aside) after the disks were
# listed and before the first detach: the interleaving the race needs, made certain.
_SPAWNER = textwrap.dedent(
    """
    import os, sys
    from service.sandboxes.local import holder_start
    from service.sandboxes.local.mounts import sandbox_disks

    own, sibling, moved = sys.argv[1:4]
    real_detach = holder_start.detach

    def detach_after_teardown_moved_it(point):
        if os.path.exists(sibling):
            os.rename(sibling, moved)
        return real_detach(point)

    holder_start.detach = detach_after_teardown_moved_it
    holder_start.leave_other_disks(own + "/disk")
    print("\\n".join(p for p in sandbox_disks() if p.startswith(os.path.dirname(own))))
    """
)


def test_a_sibling_disk_moved_aside_meanwhile_is_left_too(tmp_path: Path) -> None:
    sandboxes = tmp_path / "state" / "sandboxes"
    own, sibling = sandboxes / "own", sandboxes / "sibling-template"
    moved = sandboxes / ".gone-sibling-template-0123456789ab"
    for root in (own, sibling):
        (root / SANDBOX_DISK).mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(root / SANDBOX_DISK)], check=True)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _SPAWNER, str(own), str(sibling), str(moved)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).resolve().parents[3],
        )
        assert done.returncode == 0, done.stderr
        assert moved.exists(), "the sibling was not moved aside during the spawner's leaving"
        assert done.stdout.split() == [str(own / SANDBOX_DISK)]
    finally:
        for disk in (own / SANDBOX_DISK, moved / SANDBOX_DISK, sibling / SANDBOX_DISK):
            if disk.is_dir():
                detach(str(disk))
