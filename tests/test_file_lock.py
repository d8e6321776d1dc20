"""service.file_lock: exclusive across holders, and closed to other users."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from service.file_lock import file_lock, lock_now


async def test_a_second_holder_waits_for_the_first(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "x.lock"
    order: list[str] = []
    held = asyncio.Event()

    async def hold(name: str, pause_s: float) -> None:
        async with file_lock(path):
            order.append(f"{name} in")
            held.set()
            await asyncio.sleep(pause_s)
            order.append(f"{name} out")

    first = asyncio.create_task(hold("first", 0.3))
    await held.wait()
    await hold("second", 0)
    await first
    assert order == ["first in", "first out", "second in", "second out"]


async def test_the_lock_file_is_the_servers_alone(tmp_path: Path) -> None:
    # flock needs no write access: a sandbox user able to open it could hold it forever.
    old = tmp_path / "old.lock"
    old.write_text("")
    old.chmod(0o644)
    for path in (tmp_path / "new.lock", old):
        async with file_lock(path):
            pass
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_lock_now_takes_a_free_lock_and_never_waits_for_a_held_one(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "x.lock"
    async with file_lock(path, shared=True):
        assert lock_now(path) is None
    fd = lock_now(path)
    assert fd is not None
    try:
        assert lock_now(path) is None  # flock: another descriptor is another holder
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        os.close(fd)
    fd = lock_now(path)
    assert fd is not None
    os.close(fd)
