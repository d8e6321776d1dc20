"""Collecting workdir files into a result, within count and size bounds."""

from __future__ import annotations

from dataclasses import dataclass, field

from service.config import Settings
from service.sandboxes.base import WORKDIR, Sandbox

__all__ = ["CollectedFiles", "collect_workdir"]

_LIST_TIMEOUT_S = 30.0
# One "size<TAB>relative path" line per regular file; NUL-free paths only.
_LIST_COMMAND = "find . -type f -printf '%s\\t%P\\n' 2>/dev/null | LC_ALL=C sort -t$'\\t' -k2"


@dataclass
class CollectedFiles:
    files: dict[str, bytes] = field(default_factory=dict)
    omitted: list[str] = field(default_factory=list)


async def collect_workdir(
    sandbox: Sandbox, settings: Settings, *, exclude: set[str]
) -> CollectedFiles:
    """Read workdir files in path order until a bound is hit; list the rest as omitted."""
    listing = await sandbox.exec(_LIST_COMMAND, timeout_s=_LIST_TIMEOUT_S)
    collected = CollectedFiles()
    total = 0
    for size, path in _parse_listing(listing.stdout):
        if path in exclude:
            continue
        fits = (
            len(collected.files) < settings.collect_max_files
            and size <= settings.collect_max_file_bytes
            and total + size <= settings.collect_max_total_bytes
        )
        if not fits:
            collected.omitted.append(path)
            continue
        data = await sandbox.read_file(
            f"{WORKDIR}/{path}", max_bytes=settings.collect_max_file_bytes
        )
        if data is not None:
            collected.files[path] = data
            total += len(data)
    return collected


def _parse_listing(stdout: str) -> list[tuple[int, str]]:
    entries = []
    for line in stdout.splitlines():
        size, _, path = line.partition("\t")
        if path and size.isdigit():
            entries.append((int(size), path))
    return entries
