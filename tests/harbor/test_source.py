"""Reading task directories: task roots, archives, and everything they must refuse."""

from __future__ import annotations

import functools
import gzip
import io
import os
import tarfile
import tracemalloc
import zlib
from pathlib import Path

import pytest

from service.errors import SpecError
from service.harbor.source import TaskFile, read_archive, read_rooted, tree_digest

TASKS = Path(__file__).parent / "tasks"
_MB = 1024 * 1024


def _violation(error: pytest.ExceptionInfo[SpecError]) -> tuple[str, str]:
    (violation,) = error.value.violations
    return violation.field, violation.description


def test_a_task_under_a_root_is_read_with_its_modes() -> None:
    tree = read_rooted("tasks/multi_reward", [TASKS.parent / "tasks"], _MB)
    assert set(tree) >= {"instruction.md", "task.toml", "tests/test.sh", "solution/solve.sh"}
    assert tree["tests/test.sh"].mode == 0o755
    assert read_rooted("multi_reward", [TASKS], _MB) == tree  # one root: its name is optional


@pytest.mark.parametrize(
    "path", ["", "/etc", "../tasks/multi_reward", "multi_reward/../needs_root", "a//b", "./x"]
)
def test_paths_that_could_escape_are_refused(path: str) -> None:
    with pytest.raises(SpecError) as error:
        read_rooted(path, [TASKS], _MB)
    assert _violation(error)[0] == "spec.harbor_task.path"


def test_a_symbolic_link_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "escape").symlink_to(TASKS / "multi_reward")
    with pytest.raises(SpecError) as error:
        read_rooted("escape", [root], _MB)
    assert "out of its task root" in _violation(error)[1]


def test_a_link_inside_the_task_leading_out_is_refused(tmp_path: Path) -> None:
    task = tmp_path / "root" / "task"
    task.mkdir(parents=True)
    (task / "instruction.md").symlink_to("/etc/hostname")
    with pytest.raises(SpecError) as error:
        read_rooted("task", [tmp_path / "root"], _MB)
    assert _violation(error) == (
        "spec.harbor_task.path",
        "instruction.md is a link leading out of the task directory",
    )


def test_no_roots_and_unknown_roots_are_named(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="ROLLOUT_TASK_ROOTS"):
        read_rooted("multi_reward", [], _MB)
    with pytest.raises(SpecError, match="task root's name"):
        read_rooted("nope/multi_reward", [TASKS, tmp_path], _MB)
    with pytest.raises(SpecError, match="no task directory"):
        read_rooted("absent", [TASKS], _MB)


def test_the_uncompressed_bound_is_enforced() -> None:
    with pytest.raises(SpecError, match="larger than 100 bytes"):
        read_rooted("multi_reward", [TASKS], 100)


def _archive(members: list[tarfile.TarInfo], data: dict[str, bytes] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for member in members:
            content = (data or {}).get(member.name)
            tar.addfile(member, io.BytesIO(content) if content is not None else None)
    return buffer.getvalue()


def _file(name: str, content: bytes, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    member = tarfile.TarInfo(name)
    member.size, member.mode = len(content), mode
    return member, content


def test_an_archive_of_one_directory_is_that_directory() -> None:
    a, a_data = _file("task/instruction.md", b"do it\n")
    b, b_data = _file("task/tests/test.sh", b"echo 1\n", 0o755)
    tree = read_archive(_archive([a, b], {a.name: a_data, b.name: b_data}), _MB, _MB)
    assert tree["instruction.md"].data == b"do it\n"
    assert tree["tests/test.sh"].mode == 0o755
    assert len(tree_digest(tree)) == 64


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        (tarfile.SYMTYPE, "task/link"),
        (tarfile.LNKTYPE, "task/hard"),
        (tarfile.CHRTYPE, "task/dev"),
        (tarfile.FIFOTYPE, "task/fifo"),
        (tarfile.REGTYPE, "../outside"),
        (tarfile.REGTYPE, "/etc/cron.d/x"),
    ],
)
def test_links_devices_and_escaping_names_are_refused(kind: bytes, name: str) -> None:
    member = tarfile.TarInfo(name)
    member.type = kind
    member.linkname = "/etc/shadow"
    with pytest.raises(SpecError) as error:
        read_archive(_archive([member]), _MB, _MB)
    field, description = _violation(error)
    assert field == "spec.harbor_task.archive"
    assert name[:20] in description


def test_a_name_that_is_a_file_and_a_directory_is_refused() -> None:
    """`x` and `x/y` both files: no directory could hold them, and writing the build context
    would fail half-way."""
    members = [_file(name, b"z") for name in ("instruction.md", "environment/x", "environment/x/y")]
    archive = _archive([m for m, _ in members], {m.name: data for m, data in members})
    with pytest.raises(SpecError) as error:
        read_archive(archive, _MB, _MB)
    assert _violation(error) == (
        "spec.harbor_task.archive",
        "member 'environment/x' is a file and a directory",
    )


def test_archive_bounds_compressed_and_uncompressed() -> None:
    big, data = _file("task/big.bin", bytes(4 * _MB))  # zeros: compresses to a few KiB
    archive = _archive([big], {big.name: data})
    with pytest.raises(SpecError, match=f"exceeds {len(archive) - 1} compressed"):
        read_archive(archive, len(archive) - 1, 8 * _MB)
    with pytest.raises(SpecError, match="larger than"):
        read_archive(archive, _MB, _MB)  # a decompression bomb stops at the bound


def test_garbage_is_not_an_archive() -> None:
    with pytest.raises(SpecError, match=r"not a readable \.tar\.gz"):
        read_archive(os.urandom(64), _MB, _MB)


@functools.cache
def _zeros_gz(size: int) -> bytes:
    """`size` zero bytes as one gzip member (gzip members concatenate into one stream)."""
    compressor = zlib.compressobj(wbits=31)
    chunk = bytes(_MB)
    return b"".join(compressor.compress(chunk) for _ in range(size // _MB)) + compressor.flush()


def _header_bomb(kind: bytes, record_size: int, repeat: int = 1) -> bytes:
    """`repeat` times: a `kind` header (PAX, GNU long name) whose record is `record_size`
    zero bytes, followed by the empty file it describes."""
    header = tarfile.TarInfo("././@header")
    header.type, header.size = kind, record_size
    described = tarfile.TarInfo("task/x").tobuf(tarfile.USTAR_FORMAT)
    one = gzip.compress(header.tobuf(tarfile.USTAR_FORMAT)) + _zeros_gz(record_size)
    return (one + gzip.compress(described)) * repeat + gzip.compress(bytes(1024))


def _refused_header_bytes(archive: bytes, max_compressed: int, max_bytes: int) -> int:
    """The peak of memory traced while `archive` is refused for its headers' bytes."""
    tracemalloc.start()
    try:
        with pytest.raises(SpecError) as error:
            read_archive(archive, max_compressed, max_bytes)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    field, description = _violation(error)
    assert field == "spec.harbor_task.archive"
    assert "headers included" in description
    return peak


@pytest.mark.parametrize(
    "kind",
    [tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK],
)
def test_a_header_bomb_is_refused_before_it_is_read(kind: bytes) -> None:
    """Issue 21: a 256 MiB PAX header of zeros, gzipped to ~250 KiB, raised the server's
    memory by 305 MiB; at the default bounds it is refused before a byte of it is read."""
    archive = _header_bomb(kind, 256 * _MB)
    assert len(archive) < _MB
    peak = _refused_header_bytes(archive, 16 * _MB, 64 * _MB)
    assert peak < 4 * _MB


def test_headers_count_toward_the_bound_together() -> None:
    """Each 1 MiB long-name record is small, and describes an empty file: only counting
    every header byte refuses the archive (1 MiB of content allowed, 8 MiB of headers)."""
    archive = _header_bomb(tarfile.GNUTYPE_LONGNAME, _MB, repeat=12)
    peak = _refused_header_bytes(archive, _MB, _MB)
    assert peak < 4 * _MB


@pytest.mark.parametrize("form", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_long_names_in_gnu_and_pax_archives_are_read(form: int) -> None:
    name = "task/" + "deep/" * 40 + "instruction.md"
    member, data = _file(name, b"do it\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=form) as tar:
        member.pax_headers = {"comment": "x" * 4096}
        tar.addfile(member, io.BytesIO(data))
    tree = read_archive(buffer.getvalue(), _MB, _MB)
    assert tree == {name.removeprefix("task/"): TaskFile(b"do it\n", 0o644)}
