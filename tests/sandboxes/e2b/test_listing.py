"""Listing an E2B sandbox's files (one `find | sort | head` command, fake cloud on loopback),
and collecting a workdir through it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.engine.collect import collect_workdir
from service.sandboxes.base import LIST_MAX_DEPTH, WORKDIR, FileEntry
from service.sandboxes.e2b.backend import E2BBackend
from service.sandboxes.e2b.sandbox import E2BSandbox
from testing.e2b_support import make_backend, make_request, make_settings
from testing.fakes.e2b_cloud import FakeE2B
from tests.sandboxes.listing_tree import TRICKY, expected, make_tree_command


@pytest.fixture
async def sandbox(cloud: FakeE2B, tmp_path: Path) -> AsyncIterator[E2BSandbox]:
    backend: E2BBackend = make_backend(tmp_path)
    sandbox = await backend.create(make_request())
    yield sandbox
    await backend.close()


async def run(sandbox: E2BSandbox, command: str) -> None:
    result = await sandbox.exec(command, timeout_s=30)
    assert result.exit_code == 0, result.stderr


async def test_lists_recursively_in_byte_order_with_sizes(sandbox: E2BSandbox) -> None:
    await run(sandbox, make_tree_command(TRICKY))
    assert await sandbox.list_files(WORKDIR, max_entries=100) == expected(TRICKY)
    assert await sandbox.list_files(WORKDIR, max_entries=4) == expected(TRICKY)[:4]
    assert await sandbox.list_files(WORKDIR, max_entries=0) == []


async def test_links_odd_names_and_depth_are_left_out(sandbox: E2BSandbox) -> None:
    nested = "deep/" + "d/" * (LIST_MAX_DEPTH - 2)
    await run(
        sandbox,
        "echo real > real.txt && ln -s / root && ln -s real.txt real-link && "
        "mkdir -p sub && ln -s sub sub-link && echo in > sub/in.txt && "
        f"printf x > $'bad\\xff' && mkdir -p $'dir\\xfe' && printf y > $'dir\\xfe/y' && "
        f"mkdir -p {nested}d && echo ok > {nested}ok && echo no > {nested}d/no",
    )
    assert await sandbox.list_files(WORKDIR, max_entries=100) == [
        FileEntry(f"{nested}ok", 3),
        FileEntry("real.txt", 5),
        FileEntry("sub/in.txt", 3),
    ]


async def test_missing_directory_or_a_link_lists_empty(sandbox: E2BSandbox) -> None:
    await run(sandbox, "mkdir -p real && echo x > real/x && ln -s real link")
    assert await sandbox.list_files(f"{WORKDIR}/nope", max_entries=10) == []
    assert await sandbox.list_files(f"{WORKDIR}/link", max_entries=10) == []
    assert await sandbox.list_files(f"{WORKDIR}/real", max_entries=10) == [FileEntry("x", 2)]


async def test_collects_the_workdir_within_its_bounds(sandbox: E2BSandbox, tmp_path: Path) -> None:
    await run(
        sandbox,
        "printf a > a.txt && printf bb > b.txt && head -c 5000 /dev/zero > big.bin && "
        "mkdir -p tests && printf t > tests/test_x.py && ln -s /etc/hostname host",
    )
    settings = make_settings(tmp_path, collect_max_files=2, collect_max_file_bytes=4096)
    collected = await collect_workdir(sandbox, settings, exclude={"tests/test_x.py"})
    assert collected.files == {"a.txt": b"a", "b.txt": b"bb"}
    assert collected.omitted == ["big.bin"]


async def test_an_excluded_directory_is_never_entered(sandbox: E2BSandbox) -> None:
    # ".st*te" is a name, not a pattern: find -path reading it as a glob would prune ".stxte".
    await run(
        sandbox,
        "mkdir -p '.st*te/deep' .stxte && for i in $(seq 30); do echo s > \".st*te/deep/$i\"; "
        "done && echo k > .stxte/keep && echo t > task.txt",
    )
    listed = await sandbox.list_files(WORKDIR, max_entries=2, exclude=[".st*te"])
    assert listed == [FileEntry(".stxte/keep", 2), FileEntry("task.txt", 2)]
    deeper = await sandbox.list_files(WORKDIR, max_entries=2, exclude=[".st*te/deep/"])
    assert deeper == listed
