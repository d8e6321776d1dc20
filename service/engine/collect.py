"""Collecting workdir files into a result, within count and size bounds.

Never collected: the verifier's files (`exclude`) and the agent's own directories
(`Agent.state_dirs`), which lie in the workdir when it is HOME or above (`/home/user`,
`/home`). Those are never entered by the listing, so however much a harness keeps there
(an install, caches, transcripts) none of it uses up the listing's bound: dot-directories
sort first, and would otherwise crowd the task's files out of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from service.config import Settings
from service.sandboxes import WORKDIR, FileEntry, Sandbox

__all__ = ["MAX_OMITTED", "CollectedFiles", "collect_workdir"]

MAX_OMITTED = 256
"""Paths named in files_omitted at most; files past them in path order go unnamed."""


@dataclass
class CollectedFiles:
    files: dict[str, bytes] = field(default_factory=dict)
    omitted: list[str] = field(default_factory=list)


async def collect_workdir(
    sandbox: Sandbox,
    settings: Settings,
    *,
    exclude: set[str],
    skip_dirs: Iterable[str] = (),
    workdir: str = WORKDIR,
) -> CollectedFiles:
    """Read workdir files in path order until a bound is hit; list the rest as omitted.

    `exclude`: files relative to the workdir; `skip_dirs`: absolute directories, those
    beneath the workdir never listed. The listing asks for no more files than can be
    collected, excluded or named as omitted.
    """
    limit = settings.collect_max_files + MAX_OMITTED + len(exclude)
    listing = await sandbox.list_files(
        workdir, max_entries=limit, exclude=_beneath(workdir, skip_dirs)
    )
    collected = CollectedFiles()
    total = 0
    for entry in listing:
        if entry.path in exclude:
            continue
        if not _fits(entry, len(collected.files), total, settings):
            if len(collected.omitted) < MAX_OMITTED:
                collected.omitted.append(entry.path)
            continue
        data = await sandbox.read_file(
            f"{workdir}/{entry.path}", max_bytes=settings.collect_max_file_bytes
        )
        if data is not None:
            collected.files[entry.path] = data
            total += len(data)
    return collected


def _beneath(workdir: str, directories: Iterable[str]) -> list[str]:
    """Those of `directories` beneath `workdir`, relative to it."""
    prefix = f"{workdir.rstrip('/')}/"
    return [path.removeprefix(prefix) for path in directories if path.startswith(prefix)]


def _fits(entry: FileEntry, count: int, total: int, settings: Settings) -> bool:
    return (
        count < settings.collect_max_files
        and entry.size <= settings.collect_max_file_bytes
        and total + entry.size <= settings.collect_max_total_bytes
    )
