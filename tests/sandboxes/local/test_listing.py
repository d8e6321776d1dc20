"""Listing a local sandbox's files: order, sizes, bounds, odd names, and planted links."""

from __future__ import annotations

import os
import random
import shlex
from pathlib import Path

import pytest

from service.sandboxes.base import LIST_MAX_DEPTH, WORKDIR, FileEntry
from service.sandboxes.e2b.find_listing import list_by_find
from service.sandboxes.local import hostfs
from service.sandboxes.local.backend import LocalSandbox
from service.sandboxes.local.hostfs import list_beneath
from tests.sandboxes.listing_tree import TRICKY, expected


async def test_lists_recursively_in_byte_order_with_sizes(local_sandbox: LocalSandbox) -> None:
    await local_sandbox.write_files({f"{WORKDIR}/{path}": data for path, data in TRICKY.items()})
    listing = await local_sandbox.list_files(WORKDIR, max_entries=100)
    assert listing == expected(TRICKY)
    sorted_by_sort = await local_sandbox.exec(
        "find . -type f -printf '%P\\0' | LC_ALL=C sort -z", timeout_s=30
    )
    assert [entry.path for entry in listing] == sorted_by_sort.stdout.split("\0")[:-1]


async def test_max_entries_gives_the_first_in_order(local_sandbox: LocalSandbox) -> None:
    await local_sandbox.write_files({f"{WORKDIR}/{path}": data for path, data in TRICKY.items()})
    assert await local_sandbox.list_files(WORKDIR, max_entries=5) == expected(TRICKY)[:5]
    assert await local_sandbox.list_files(WORKDIR, max_entries=0) == []


async def test_missing_directory_or_a_file_lists_empty(local_sandbox: LocalSandbox) -> None:
    await local_sandbox.write_files({f"{WORKDIR}/f.txt": b"x", "/tmp/t/g.txt": b"yy"})
    assert await local_sandbox.list_files(f"{WORKDIR}/nope", max_entries=10) == []
    assert await local_sandbox.list_files(f"{WORKDIR}/f.txt", max_entries=10) == []
    assert await local_sandbox.list_files("/tmp/t", max_entries=10) == [FileEntry("g.txt", 2)]
    with pytest.raises(ValueError, match="sandbox path"):
        await local_sandbox.list_files("/etc", max_entries=10)


async def test_links_are_neither_listed_nor_followed(
    local_sandbox: LocalSandbox, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "host-secret.txt").write_bytes(b"host")
    plant = (
        f"echo real > real.txt && mkdir -p d/e && echo in > d/e/in.txt && "
        f"ln -s {outside} host-dir && ln -s {outside}/deep/host-secret.txt host-file && "
        "ln -s / root && ln -s d d-link && ln -s real.txt real-link && mkfifo fifo"
    )
    result = await local_sandbox.exec(plant, timeout_s=30)
    assert result.exit_code == 0, result.stderr
    listing = await local_sandbox.list_files(WORKDIR, max_entries=1000)
    assert listing == [FileEntry("d/e/in.txt", 3), FileEntry("real.txt", 5)]


async def test_a_directory_that_is_a_link_lists_empty(
    local_sandbox: LocalSandbox, tmp_path: Path
) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "host.txt").write_bytes(b"host")
    swap = f"mkdir -p sub && mv sub sub.real && ln -s {tmp_path}/outside sub"
    assert (await local_sandbox.exec(swap, timeout_s=30)).exit_code == 0
    assert await local_sandbox.list_files(f"{WORKDIR}/sub", max_entries=10) == []


async def test_a_file_swapped_for_a_link_is_not_read_through(
    local_sandbox: LocalSandbox, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"host file")
    await local_sandbox.write_files({f"{WORKDIR}/notes.txt": b"notes"})
    assert await local_sandbox.list_files(WORKDIR, max_entries=10) == [FileEntry("notes.txt", 5)]
    await local_sandbox.exec(f"rm notes.txt && ln -s {victim} notes.txt", timeout_s=30)
    assert await local_sandbox.read_file(f"{WORKDIR}/notes.txt", max_bytes=100) is None
    assert await local_sandbox.list_files(WORKDIR, max_entries=10) == []


async def test_a_directory_swapped_mid_walk_never_lists_outside(
    local_sandbox: LocalSandbox, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    for i in range(20):
        (outside / f"host-{i}.txt").write_bytes(b"host")
    staged = {f"{WORKDIR}/race/a{i:03}": b"" for i in range(500)}
    await local_sandbox.write_files({**staged, f"{WORKDIR}/race/real/inside.txt": b"in"})
    # race/real and race/link trade places atomically, over and over: race/real is the
    # directory or a link to `outside`, half the time each. The walk stats a000..a499
    # between reading race/ and opening race/real, a window wide enough for a trade.
    swap = (
        "import ctypes, os\n"
        f"os.symlink({str(outside)!r}, 'race/link')\n"
        "renameat2 = ctypes.CDLL(None, use_errno=True).renameat2\n"
        "while renameat2(-100, b'race/real', -100, b'race/link', 2) == 0:\n"
        "    pass\n"
        "raise OSError(ctypes.get_errno(), 'renameat2')\n"
    )
    swapper = await local_sandbox.spawn(f"exec python3 -c {shlex.quote(swap)}")
    try:
        seen: set[str] = set()
        for _ in range(100):
            listing = await local_sandbox.list_files(WORKDIR, max_entries=1000)
            seen.update(entry.path for entry in listing if not entry.path.startswith("race/a"))
    finally:
        await swapper.kill()
    assert seen <= {"race/real/inside.txt", "race/link/inside.txt"}
    assert not (await swapper.wait()).stderr, "the trades went on until killed"


def test_names_that_are_not_utf8_are_skipped_with_what_is_beneath(tmp_path: Path) -> None:
    top = tmp_path / "top"
    (top / "ok").mkdir(parents=True)
    (top / "ok" / "f").write_bytes(b"f")
    os.mkdir(os.path.join(os.fsencode(top), b"dir\xfe"))
    Path(os.fsdecode(os.path.join(os.fsencode(top), b"dir\xfe", b"x"))).write_bytes(b"x")
    Path(os.fsdecode(os.path.join(os.fsencode(top), b"bad\xff"))).write_bytes(b"bad")
    assert list_beneath(tmp_path, ("top",), 100) == [FileEntry("ok/f", 1)]


def test_paths_deeper_than_the_bound_are_left_out(tmp_path: Path) -> None:
    deepest = tmp_path.joinpath("top", *["d"] * LIST_MAX_DEPTH)
    deepest.mkdir(parents=True)
    (deepest.parent / "in.txt").write_bytes(b"in")
    (deepest / "out.txt").write_bytes(b"out")
    listing = list_beneath(tmp_path, ("top",), 100)
    assert listing == [FileEntry("d/" * (LIST_MAX_DEPTH - 1) + "in.txt", 2)]


def test_walk_stops_before_a_directory_past_the_scan_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hostfs, "LIST_SCAN_SLACK", 5)
    top = tmp_path / "top"
    for path in ["a/1", "a/2", "a/3", *(f"b/{i}" for i in range(10)), "c"]:
        (top / path).parent.mkdir(parents=True, exist_ok=True)
        (top / path).write_bytes(b".")
    # 5 + 5 entries may be read: 3 at the top, 3 in a, then b's 10 would pass the bound.
    assert [entry.path for entry in list_beneath(tmp_path, ("top",), 5)] == ["a/1", "a/2", "a/3"]


def test_any_tree_lists_as_its_sorted_paths(tmp_path: Path) -> None:
    rng = random.Random(7)
    alphabet = ["a", "b", "-", ".", "0", "é", " ", "_"]
    top = tmp_path / "top"
    files: dict[str, bytes] = {}
    for _ in range(300):
        parts = ["".join(rng.choices(alphabet, k=rng.randint(1, 3))) for _ in range(3)]
        parts = parts[: rng.randint(1, 3)]
        if {".", ".."} & set(parts):
            continue
        path = "/".join(parts)
        try:
            (top / path).parent.mkdir(parents=True, exist_ok=True)
            (top / path).write_bytes(b"x" * rng.randint(0, 9))
        except (FileExistsError, NotADirectoryError, IsADirectoryError):
            continue  # a name already taken by a file or a directory
        files[path] = (top / path).read_bytes()
    files = {path: data for path, data in files.items() if (top / path).is_file()}
    full = expected(files)
    assert list_beneath(tmp_path, ("top",), 10_000) == full
    assert list_beneath(tmp_path, ("top",), 17) == full[:17]


async def test_the_find_listing_agrees_with_the_host_walk(
    local_sandbox: LocalSandbox, tmp_path: Path
) -> None:
    await local_sandbox.write_files({f"{WORKDIR}/{path}": data for path, data in TRICKY.items()})
    plant = (
        f"ln -s {tmp_path} host-dir && ln -s a.txt a-link && printf x > $'bad\\xff' && "
        f"mkdir -p deep/$(printf 'd/%.0s' $(seq {LIST_MAX_DEPTH})) && "
        f"touch deep/$(printf 'd/%.0s' $(seq {LIST_MAX_DEPTH - 2}))in && "
        f"touch deep/$(printf 'd/%.0s' $(seq {LIST_MAX_DEPTH - 1}))out"
    )
    assert (await local_sandbox.exec(plant, timeout_s=30)).exit_code == 0
    host = await local_sandbox.list_files(WORKDIR, max_entries=1000)
    assert [entry.path.rsplit("/", 1)[-1] for entry in host if "/d/" in entry.path] == ["in"]
    assert await list_by_find(local_sandbox, WORKDIR, 1000) == host
    assert await list_by_find(local_sandbox, WORKDIR, 4) == host[:4]
    assert await list_by_find(local_sandbox, f"{WORKDIR}/host-dir", 10) == []
    assert await list_by_find(local_sandbox, f"{WORKDIR}/nope", 10) == []
