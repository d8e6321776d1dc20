"""`Sandbox.list_files` for a backend without host-side access: one command in the sandbox.

`find | sort | head` run inside, bounded by LIST_TIMEOUT_S and `max_entries`; the listing
crosses as base64 because a backend may hand output over as text (the E2B SDK decodes each
chunk, replacing what is not UTF-8), which would mangle a name, or a character cut in two.
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from collections.abc import Collection

from service.errors import SandboxError
from service.sandboxes.base import LIST_MAX_DEPTH, FileEntry, OutputStream, Sandbox

__all__ = ["LIST_TIMEOUT_S", "list_by_find"]

LIST_TIMEOUT_S = 30.0
"""Budget of the listing command; a listing that takes longer fails."""
_RECORD_BYTES = 4096 + 24
"""Longest "size path\\0" record: a path of PATH_MAX bytes and a 20-digit size."""


async def list_by_find(
    sandbox: Sandbox, directory: str, max_entries: int, exclude: Collection[str] = ()
) -> list[FileEntry]:
    """The first `max_entries` regular files beneath `directory`, as `Sandbox.list_files`.

    `find -P` neither follows nor lists a link, the starting directory included; it
    prunes each directory of `exclude`, never entering it. Names that are not UTF-8 are
    dropped after `head`, so they may leave the listing short.
    """
    if max_entries <= 0:
        return []
    output = _Stdout(limit=(max_entries * _RECORD_BYTES // 3 + 1) * 4)
    result = await sandbox.exec(
        _command(directory, max_entries, exclude), timeout_s=LIST_TIMEOUT_S, on_output=output.feed
    )
    problem = _problem(result.exit_code, result.timed_out, output.overflowed)
    if problem is None:
        try:
            return _parse(bytes(output.data))
        except binascii.Error as exc:
            problem = f"unreadable output ({exc})"
    raise SandboxError(f"sandbox {sandbox.id}: could not list {directory}: {problem}")


def _command(directory: str, max_entries: int, exclude: Collection[str]) -> str:
    # Records are "size path\0", sorted on everything after the first space: the path.
    # find names a path as the starting point, "/" and the rest: prune exactly those.
    paths = [f"{directory.rstrip('/')}/{path.strip('/')}" for path in exclude]
    prune = "".join(f"-path {shlex.quote(_literal(path))} -prune -o " for path in paths)
    find = (
        f"find -P {shlex.quote(directory)} -maxdepth {LIST_MAX_DEPTH} {prune}-type f "
        "-printf '%s %P\\0' 2>/dev/null"
    )
    return f"{find} | LC_ALL=C sort -z -t ' ' -k 2 | head -z -n {max_entries} | base64 -w 0"


def _literal(path: str) -> str:
    """`path` as a `find -path` pattern matching only itself (its glob characters escaped)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", path)


class _Stdout:
    """The command's stdout, up to the most a listing of that many entries can take."""

    def __init__(self, *, limit: int) -> None:
        self.data = bytearray()
        self.overflowed = False
        self._limit = limit

    def feed(self, stream: OutputStream, chunk: bytes) -> None:
        if stream is not OutputStream.STDOUT or self.overflowed:
            return
        if len(self.data) + len(chunk) > self._limit:
            self.overflowed = True
            self.data.clear()
            return
        self.data += chunk


def _problem(exit_code: int, timed_out: bool, overflowed: bool) -> str | None:
    if timed_out:
        return f"it took over {LIST_TIMEOUT_S:g}s"
    if overflowed:
        return "more output than the listing can hold"
    if exit_code != 0:
        return f"the command exited {exit_code}"
    return None


def _parse(encoded: bytes) -> list[FileEntry]:
    entries = []
    for record in base64.b64decode(encoded, validate=True).split(b"\0"):
        size, _, path = record.partition(b" ")
        if not (size.isdigit() and path):
            continue  # the empty tail after the last NUL
        try:
            entries.append(FileEntry(path.decode(), int(size)))
        except UnicodeDecodeError:
            continue
    return entries
