"""Admission rules for the paths of a task's files: each one a file the sandbox can hold.

A path is a key of `task.files` or `task.verifier_files`, relative to the workdir. It is
accepted only in its one canonical spelling, so what is staged is what was asked for and
no two keys name the same file:

| rule                                   | refused, e.g.             | would have failed as  |
| -------------------------------------- | ------------------------- | --------------------- |
| inside the workdir, or absolute        | `../x`, `/a/../x`         | an escape             |
| canonical: no empty, `.` or `..` parts | `.`, `./`, `a//b`, `a/`   | SANDBOX (a directory) |
| no control characters (NUL included)   | `a\x00b`, `a\nb`          | SANDBOX               |
| each part at most 255 bytes (NAME_MAX) | a 300-character name      | SANDBOX               |
| at most 1024 bytes in all              | a very deep path          | SANDBOX               |
| never both a file and a directory      | `a` beside `a/b`          | SANDBOX               |

The last rule spans both maps: verifier files land in the same workdir after the agent.
An absolute key ("/tests/test.sh") names a path of the sandbox's own root, so it needs an
image sandbox (on `host` the root is read-only and staging fails).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from service.errors import FieldViolation, excerpt

__all__ = ["carried_path_violations", "map_violations", "path_violations"]

_MAX_PART_BYTES = 255
_MAX_PATH_BYTES = 1024
_MAX_REPORTED = 16
"""Violations reported per map: enough to fix a spec, never a flood."""
_MAX_CARRIED = 16
_VERIFIER_TREES = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt")
"""Where the programs and configuration a FRESH verifier runs live: never carried."""


def _problem(path: str) -> str:
    """What is wrong with `path` on its own; "" when nothing is."""
    if not path or path == "/":
        return "is empty"
    if path.startswith("/"):
        path = path[1:]  # an absolute sandbox path (image sandboxes): the same rules below
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in path):
        return "must not contain control characters"
    if len(path.encode()) > _MAX_PATH_BYTES:
        return f"exceeds {_MAX_PATH_BYTES} bytes"
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "must be canonical: no empty, '.' or '..' parts (e.g. 'src/main.py')"
    if any(len(part.encode()) > _MAX_PART_BYTES for part in parts):
        return f"has a part longer than {_MAX_PART_BYTES} bytes"
    return ""


def _directories(paths: Mapping[str, bytes]) -> set[str]:
    """Every directory the paths need (their proper prefixes)."""
    return {path.rsplit("/", i)[0] for path in paths for i in range(1, path.count("/") + 1)}


def path_violations(
    files: Mapping[str, bytes],
    verifier_files: Mapping[str, bytes],
    *,
    files_field: str = "spec.task.files",
) -> Iterator[FieldViolation]:
    """Every path of either map that breaks a rule, named by its map and (short) key."""
    directories = _directories(files) | _directories(verifier_files)
    for field, paths in ((files_field, files), ("spec.task.verifier_files", verifier_files)):
        reported = 0
        for path in paths:
            problem = _problem(path)
            if not problem and path in directories:
                problem = "is a file here but a directory of another path"
            if problem and reported < _MAX_REPORTED:
                reported += 1
                yield FieldViolation(f"{field}[{excerpt(path)}]", problem)


def map_violations(field: str, paths: Mapping[str, bytes]) -> Iterator[FieldViolation]:
    """The rules for one map staged on its own (solution files)."""
    yield from path_violations(paths, {}, files_field=field)


def carried_path_violations(paths: tuple[str, ...]) -> Iterator[FieldViolation]:
    """`task.carried_paths`: canonical absolute paths outside the verifier's own trees."""
    field = "spec.task.carried_paths"
    if len(paths) > _MAX_CARRIED:
        yield FieldViolation(field, f"has more than {_MAX_CARRIED} paths")
        return
    for index, path in enumerate(paths):
        problem = "must be absolute" if not path.startswith("/") else _problem(path)
        if not problem and path.split("/")[1] in _VERIFIER_TREES:
            problem = (
                "lies in a tree whose programs and configuration the verifier runs "
                "(/usr, /bin, /sbin, /lib*, /etc, /opt): use verify_mode IN_PLACE"
            )
        if problem:
            yield FieldViolation(f"{field}[{index}]", problem)
