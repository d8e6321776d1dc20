"""Reading a Harbor task directory into memory, from a task root or an uploaded archive.

Nothing outside what the caller may name is ever read:

| source  | refused                                                                          |
| ------- | -------------------------------------------------------------------------------- |
| path    | absolute, empty, `.`/`..` parts, control characters; an unknown root; a          |
|         | directory or file whose real path (links resolved) leaves the task directory     |
| archive | over ROLLOUT_HARBOR_ARCHIVE_MAX_MB compressed; not gzip/tar; any member that is   |
|         | not a regular file or directory (links, devices, fifos); absolute or `..` names; |
|         | a name that is a file and, by another member's, a directory (`a` and `a/b`);     |
|         | a stream over ROLLOUT_HARBOR_TASK_MAX_MB + 8 MiB, headers included, refused      |
|         | before it is read (`bounded`: tarfile reads PAX and long-name headers whole)     |
| both    | over ROLLOUT_HARBOR_TASK_MAX_MB or _MAX_FILES uncompressed, counted as it is read |

The tree is keyed by "/"-separated path relative to the task directory; an archive whose
only top-level entry is a directory is that directory.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, cast

from service.errors import FieldViolation, SpecError
from service.harbor.bounded import BoundedReader, BoundExceeded

__all__ = ["TaskFile", "TaskTree", "read_archive", "read_rooted", "tree_digest"]

FIELD = "spec.harbor_task"
_MAX_FILES = 4096
_HEADER_BYTES = _MAX_FILES * 4 * tarfile.BLOCKSIZE
"""What an archive may hold beyond its content: four blocks a member (its header, a
long-name or PAX header and one block of its record, padding), 8 MiB in all."""


@dataclass(frozen=True)
class TaskFile:
    data: bytes
    mode: int
    """Permission bits (0o777 at most)."""


TaskTree = dict[str, TaskFile]


def refuse(field: str, description: str) -> SpecError:
    return SpecError([FieldViolation(field, description)])


class _Budget:
    """Counts files and bytes as they are read; refuses past the bounds."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes, self.bytes, self.files = max_bytes, 0, 0

    def take(self, size: int, field: str) -> None:
        self.bytes += size
        self.files += 1
        if self.bytes > self.max_bytes:
            raise refuse(field, f"the task is larger than {self.max_bytes} bytes uncompressed")
        if self.files > _MAX_FILES:
            raise refuse(field, f"the task has more than {_MAX_FILES} files")


def read_rooted(path: str, roots: list[Path], max_bytes: int) -> TaskTree:
    """The task directory `path` names under one of `roots` (see the module docstring)."""
    field = f"{FIELD}.path"
    directory = _rooted(path, roots, field)
    budget, tree = _Budget(max_bytes), TaskTree()
    for parent, dirnames, filenames in os.walk(directory, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if Path(parent, d).is_symlink()]):
            file = Path(parent, name)
            relative = file.relative_to(directory).as_posix()
            real = Path(os.path.realpath(file))
            if not real.is_relative_to(directory):
                raise refuse(field, f"{relative} is a link leading out of the task directory")
            if not real.is_file():
                raise refuse(field, f"{relative} is not a regular file")
            data = real.read_bytes()
            budget.take(len(data), field)
            tree[relative] = TaskFile(data, stat.S_IMODE(real.stat().st_mode) & 0o777)
    return tree


def _rooted(path: str, roots: list[Path], field: str) -> Path:
    if not roots:
        raise refuse(field, "the server has no task roots (ROLLOUT_TASK_ROOTS); upload an archive")
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise refuse(field, "must be a relative canonical path: '<root>/<task>' or '<task>'")
    if any(ord(c) < 0x20 for c in path):
        raise refuse(field, "must not contain control characters")
    named = {root.name: root for root in roots}
    if parts[0] in named and len(parts) > 1:
        root, rest = named[parts[0]], parts[1:]
    elif len(roots) == 1:
        root, rest = roots[0], parts
    else:
        raise refuse(field, f"must start with a task root's name: one of {sorted(named)}")
    real_root = Path(os.path.realpath(root))
    directory = Path(os.path.realpath(real_root.joinpath(*rest)))
    if not directory.is_relative_to(real_root):
        raise refuse(field, "leads out of its task root (a symbolic link)")
    if not directory.is_dir():
        raise refuse(field, f"no task directory {path!r} under the task root {root.name!r}")
    return directory


def read_archive(archive: bytes, max_compressed: int, max_bytes: int) -> TaskTree:
    """The task directory of a .tar.gz archive (see the module docstring)."""
    field = f"{FIELD}.archive"
    if len(archive) > max_compressed:
        raise refuse(field, f"{len(archive)} bytes exceeds {max_compressed} compressed")
    budget, tree = _Budget(max_bytes), TaskTree()
    limit = max_bytes + _HEADER_BYTES
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(archive)) as stream:
            bounded = BoundedReader(cast(BinaryIO, stream), limit)
            with tarfile.open(fileobj=cast(BinaryIO, bounded), mode="r:") as tar:
                for member in tar:  # streamed: nothing is read past the budget
                    _take_member(tar, member, tree, budget, field)
    except BoundExceeded as exc:
        why = f"holds more than {limit} bytes uncompressed, headers included ({exc})"
        raise refuse(field, why) from exc
    except (tarfile.TarError, zlib.error, EOFError, OSError) as exc:
        raise refuse(field, f"is not a readable .tar.gz: {exc}") from exc
    _refuse_files_as_directories(tree, field)
    return _unwrapped(tree)


def _refuse_files_as_directories(tree: TaskTree, field: str) -> None:
    """No path may be a file and another file's directory (`a` and `a/b`): no directory on
    disk could hold both (a build context, `hostfs` staging)."""
    for path in tree:
        parent = path.rpartition("/")[0]
        while parent:
            if parent in tree:
                raise refuse(field, f"member {parent[:80]!r} is a file and a directory")
            parent = parent.rpartition("/")[0]


def _take_member(
    tar: tarfile.TarFile, member: tarfile.TarInfo, tree: TaskTree, budget: _Budget, field: str
) -> None:
    name = PurePosixPath(member.name)
    parts = [part for part in name.parts if part != "."]
    if name.is_absolute() or ".." in parts or any(ord(c) < 0x20 for c in member.name):
        raise refuse(field, f"member {member.name[:80]!r} escapes the archive")
    if not (member.isdir() or member.isreg()):
        raise refuse(field, f"member {member.name[:80]!r} is not a regular file or directory")
    budget.take(member.size if member.isreg() else 0, field)  # directories count as entries
    if member.isdir():
        return
    extracted = tar.extractfile(member)
    data = extracted.read() if extracted is not None else b""
    if parts:
        tree["/".join(parts)] = TaskFile(data, member.mode & 0o777)


def _unwrapped(tree: TaskTree) -> TaskTree:
    """An archive of one top-level directory holding the task is that directory."""
    tops = {path.split("/", 1)[0] for path in tree}
    if len(tops) == 1 and all("/" in path for path in tree):
        top = next(iter(tops))
        return {path.removeprefix(f"{top}/"): file for path, file in tree.items()}
    return tree


def tree_digest(tree: TaskTree) -> str:
    """SHA-256 over every path, mode and content: the task's identity."""
    digest = hashlib.sha256()
    for path in sorted(tree):
        file = tree[path]
        content = hashlib.sha256(file.data).hexdigest()
        digest.update(f"{path}\0{file.mode:o}\0{content}\n".encode())
    return digest.hexdigest()
