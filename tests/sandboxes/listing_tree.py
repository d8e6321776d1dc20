"""A tree of awkward file names shared by the listing tests of both backends."""

from __future__ import annotations

import shlex

from service.sandboxes.base import FileEntry

__all__ = ["TRICKY", "expected", "make_tree_command"]

# Names whose byte order differs from a per-directory sort ("dir/x" after "dir.txt" and
# "dir-a/z", before "dir0"), and names a line-based listing would break on.
TRICKY = {
    "A": b"1",
    "a-b": b"22",
    "a.txt": b"333",
    "a0": b"",
    "b c": b"4444",
    "dir-a/z": b"5",
    "dir.txt": b"66",
    "dir/sub/y": b"777",
    "dir/x": b"8",
    "dir0": b"99",
    "line\nbreak": b"0",
    "é.txt": b"ee",
    "日本/語": b"jp",
}


def expected(files: dict[str, bytes]) -> list[FileEntry]:
    """What a listing of `files` must be: sorted by the bytes of their paths."""
    return [FileEntry(path, len(files[path])) for path in sorted(files, key=str.encode)]


def make_tree_command(files: dict[str, bytes]) -> str:
    """A shell command that writes `files` (ASCII contents) beneath the current directory."""
    steps = []
    for path, data in files.items():
        quoted = shlex.quote(path)
        steps.append(
            f'mkdir -p "$(dirname {quoted})" && printf %s {shlex.quote(data.decode())} > {quoted}'
        )
    return " && ".join(steps)
