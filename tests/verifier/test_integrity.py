"""The tampering rules on diffs as a sandbox reports them (`verifier.integrity`)."""

from __future__ import annotations

import struct

import pytest

from service.sandboxes.seal import EntryKind, PathState, SystemChange, SystemDiff
from service.verifier.integrity import tampering

FILE = PathState(EntryKind.FILE)
PROGRAM = PathState(EntryKind.FILE, executable=True)
LINK = PathState(EntryKind.LINK)
DIR = PathState(EntryKind.DIR)


def _one(
    path: str, before: PathState | None, after: PathState | None, shadows: str = ""
) -> list[str]:
    return tampering(SystemDiff((SystemChange(path, before, after, shadows),)))


@pytest.mark.parametrize(
    ("path", "before", "after"),
    [
        ("/usr/bin/bash", PROGRAM, PROGRAM),  # wrapped
        ("/usr/bin/false", PROGRAM, None),  # removed
        ("/usr/bin/python3", LINK, LINK),  # pointed elsewhere
        ("/usr/lib/x86_64-linux-gnu/libc.so.6", FILE, FILE),
        ("/usr/lib/python3.11/os.py", FILE, FILE),
        ("/usr/local/lib/python3.11/site-packages/_pytest/runner.py", FILE, FILE),
        ("/etc/ld.so.conf.d/libc.conf", FILE, FILE),
        ("/etc/python3.11/sitecustomize.py", FILE, FILE),
        ("/usr/share/data.txt", FILE, PROGRAM),  # made executable
        ("/usr/lib/python3/dist-packages/pytest", DIR, None),  # a package removed
        ("/usr/lib/python3/dist-packages/pytest", DIR, PathState(EntryKind.EMPTIED_DIR)),
    ],
)
def test_what_the_verifier_may_run_cannot_change(
    path: str, before: PathState, after: PathState | None
) -> None:
    reasons = _one(path, before, after)
    assert len(reasons) == 1
    assert path in reasons[0]


@pytest.mark.parametrize(
    ("path", "shadows"),
    [
        ("/etc/ld.so.preload", ""),
        ("/usr/lib/python3/dist-packages/zz_hook.pth", ""),
        ("/usr/local/lib/python3.11/site-packages/sitecustomize.py", ""),
        ("/home/user/.local/lib/python3.11/site-packages/usercustomize.py", ""),
        ("/usr/lib/python3.11/pytest.py", ""),  # hides site-packages' pytest
        ("/usr/local/bin/python3", "/usr/bin/python3"),
        ("/conftest.py", ""),
        ("/pytest.ini", ""),
    ],
)
def test_what_would_run_first_cannot_be_added(path: str, shadows: str) -> None:
    reasons = _one(path, None, FILE, shadows)
    assert len(reasons) == 1
    assert path in reasons[0]


@pytest.mark.parametrize(
    ("path", "before", "after"),
    [
        ("/usr/local/bin/mytool", None, PROGRAM),  # a new program hiding nothing
        ("/usr/local/lib/python3.11/site-packages/requests/__init__.py", None, FILE),
        ("/usr/lib/python3/dist-packages/numpy-1.0.dist-info/RECORD", None, FILE),
        ("/etc/motd", FILE, FILE),  # configuration the loader and Python never read
        ("/etc/nginx/sites-enabled/default", LINK, None),
        ("/etc/ld.so.cache", FILE, FILE),  # rewritten: its entries are checked instead
        ("/usr/share/doc/bash/README", FILE, None),
        ("/usr/lib/python3.11/__pycache__/os.cpython-311.pyc", FILE, FILE),  # never read
        ("/usr/lib/python3.11/__pycache__/sitecustomize.cpython-311.pyc", None, FILE),
    ],
)
def test_installing_and_configuring_stay_the_agents(
    path: str, before: PathState | None, after: PathState | None
) -> None:
    assert _one(path, before, after) == []


def _ld_cache(entries: dict[str, str]) -> bytes:
    """A glibc 1.1 loader cache naming `entries` (soname -> path)."""
    strings = b""
    offsets = []
    table = 48 + 24 * len(entries)
    for name, path in entries.items():
        key = table + len(strings)
        strings += name.encode() + b"\0"
        value = table + len(strings)
        strings += path.encode() + b"\0"
        offsets.append((key, value))
    header = b"glibc-ld.so.cache1.1" + struct.pack("<II", len(entries), len(strings))
    header += bytes(48 - len(header))
    body = b"".join(struct.pack("<iIIIQ", 0x303, key, value, 0, 0) for key, value in offsets)
    return header + body + strings


LIBC = {"libc.so.6": "/lib/x86_64-linux-gnu/libc.so.6"}


def test_a_loader_cache_may_learn_new_libraries_in_the_system() -> None:
    after = _ld_cache({**LIBC, "libpq.so.5": "/usr/lib/x86_64-linux-gnu/libpq.so.5"})
    assert tampering(SystemDiff((), ld_cache=(_ld_cache(LIBC), after))) == []


@pytest.mark.parametrize(
    ("after", "said"),
    [
        (_ld_cache({"libc.so.6": "/usr/local/lib/libc.so.6"}), "libc.so.6"),
        (_ld_cache({**LIBC, "libevil.so": "/tmp/libevil.so"}), "/tmp/libevil.so"),
        (b"not a cache", "format"),
    ],
)
def test_a_loader_cache_cannot_move_or_smuggle_a_library(after: bytes, said: str) -> None:
    reasons = tampering(SystemDiff((), ld_cache=(_ld_cache(LIBC), after)))
    assert len(reasons) == 1
    assert said in reasons[0]


def test_a_walk_that_stopped_at_its_bound_is_never_trusted() -> None:
    assert tampering(SystemDiff((), complete=False))
