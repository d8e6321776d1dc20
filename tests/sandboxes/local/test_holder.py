"""A sandbox's init seen from the server: dead as soon as it begins to exit.

A dying init kills every other process of its pid namespace and waits for them before its
own exit completes (and its pidfd turns readable). A command ended by that kill must not
find the sandbox alive: its rollout would go on to verify on a dead sandbox. A process
frozen by the v1 freezer holds init in that wait for as long as the test likes.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.sandboxes.local.holder import Holder
from tests.e2e.processes import eventually

_FREEZER = Path("/sys/fs/cgroup/freezer")


def _children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _state(group: Path) -> str:
    return (group / "freezer.state").read_text().strip()


@pytest.fixture
async def frozen_cgroup() -> AsyncIterator[Path]:
    """A v1 freezer cgroup, thawed and removed afterwards."""
    if not (_FREEZER / "tasks").exists():
        pytest.skip("needs the cgroup v1 freezer, whose frozen processes outlive a SIGKILL")
    group = _FREEZER / f"rollout-test-{os.getpid()}"
    group.mkdir()
    try:
        yield group
    finally:
        (group / "freezer.state").write_text("THAWED")
        await eventually(lambda: not (group / "cgroup.procs").read_text().strip())
        group.rmdir()


async def test_an_init_killing_its_namespace_is_not_alive(frozen_cgroup: Path) -> None:
    namespace = await asyncio.create_subprocess_exec(
        "unshare", "--pid", "--fork", "sh", "-c", "sleep 600 & sleep 600",
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await eventually(lambda: _children(namespace.pid))
        [init] = _children(namespace.pid)
        await eventually(lambda: len(_children(init)) == 2)
        holder = Holder(os.pidfd_open(init))
        (frozen_cgroup / "cgroup.procs").write_text(str(_children(init)[0]))
        (frozen_cgroup / "freezer.state").write_text("FROZEN")
        await eventually(lambda: _state(frozen_cgroup) == "FROZEN")
        assert holder.alive

        os.kill(init, signal.SIGKILL)
        await eventually(lambda: len(_children(init)) == 1)  # the other sleep is gone

        assert not select.select([holder.pidfd], [], [], 0)[0]  # its exit is not complete
        assert not holder.alive
        assert holder.pid_namespace() == ""
    finally:
        (frozen_cgroup / "freezer.state").write_text("THAWED")
        await asyncio.wait_for(namespace.wait(), 30)
