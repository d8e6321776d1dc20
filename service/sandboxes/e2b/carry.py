"""A FRESH verifier's sandbox on E2B (`carry.PathCarrier`): the agent's paths carried, as
data, from its sandbox into a new one made from setup's snapshot.

    read    in the agent's sandbox, reclaimed (none of its processes left), a root `tar`
            of the paths into /tmp, read back through envd's files API into a spooled
            file on the server, at most CARRY_MAX_BYTES. That tar is the agent's program,
            so what it wrote is checked member by member (a normalised relative name at
            or below one of the paths; nothing below a link or a file; a hard link only to
            a regular file before it; regular files, directories and links kept, other
            kinds dropped) and written anew into an archive of the server's own: no tar
            ever parses the agent's bytes but Python's, and nothing is extracted here.
    lay     in the verifier's sandbox, made from setup's snapshot with no process: the
            archive uploaded, each path removed as setup left it (`reclaim`, which never
            follows a link), and the archive unpacked as root by setup's own tar, owners
            and modes kept. The paths are replaced whole, so what the agent removed below
            them is gone there too (`over` is not needed).
"""

from __future__ import annotations

import asyncio
import posixpath
import shlex
import tarfile
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO

from service.errors import SandboxError, VerifierError
from service.sandboxes.e2b.sandbox import E2BSandbox

__all__ = ["E2BCarried", "lay_carried", "read_carried", "repack"]

CARRY_MAX_BYTES = 1024**3
"""The most a carried archive may hold (the agent's workdir and `carried_paths`)."""
_SPOOL_BYTES = 8 * 1024**2
"""Archives up to this size stay in the server's memory; larger ones go to a temp file."""


@dataclass(eq=False)
class E2BCarried:
    """The agent's paths as the server's own archive; matches `base.Snapshot`."""

    paths: tuple[str, ...]
    archive: IO[bytes] = field(repr=False)

    async def release(self) -> None:
        self.archive.close()


async def read_carried(sandbox: E2BSandbox, paths: Sequence[str]) -> E2BCarried:
    """The agent's `paths` (absolute, none below another) out of its reclaimed sandbox;
    VerifierError when what it left cannot be carried (the agent's doing), SandboxError
    when E2B fails."""
    inside = f"/tmp/.rollout-carry-{uuid.uuid4().hex}.tar"
    names = " ".join(shlex.quote(path.lstrip("/")) for path in paths)
    script = (
        f"cd / && set -- && for p in {names}; do "
        '{ [ -e "$p" ] || [ -L "$p" ]; } && set -- "$@" "$p"; done; '
        f'tar --create --numeric-owner --file={inside} --files-from=/dev/null -- "$@"'
    )
    code, output = await sandbox.as_root(script)
    if code != 0:
        raise VerifierError(f"could not read the agent's {', '.join(paths)}: tar: {output}")
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as raw:
        size = await sandbox.download(inside, raw, max_bytes=CARRY_MAX_BYTES + 1, user="root")
        if size > CARRY_MAX_BYTES:
            raise VerifierError(
                f"the agent's {', '.join(paths)} hold more than {CARRY_MAX_BYTES >> 20} MiB "
                "to carry into the verifier's sandbox"
            )
        raw.seek(0)
        archive = await asyncio.to_thread(repack, raw, tuple(paths))
    return E2BCarried(tuple(paths), archive)


async def lay_carried(sandbox: E2BSandbox, carried: E2BCarried) -> None:
    """Replace `carried`'s paths in `sandbox` (the verifier's, new) with what it holds;
    SandboxError if it cannot."""
    inside = f"/tmp/.rollout-carried-{uuid.uuid4().hex}.tar"
    await sandbox.upload(inside, carried.archive, user="root")
    await sandbox.reclaim(remove=carried.paths)
    unpack = f"tar --extract --numeric-owner --same-permissions --file={inside} -C / "
    code, output = await sandbox.as_root(f"{unpack}&& rm -f {inside}")
    if code != 0:
        raise SandboxError(f"E2B sandbox {sandbox.id}: could not lay the agent's paths: {output}")


def repack(raw: IO[bytes], paths: tuple[str, ...]) -> IO[bytes]:
    """`raw`'s members checked (the module docstring) and written into a new archive,
    returned rewound; VerifierError for a member that may not be carried."""
    tops = [path.strip("/") for path in paths]
    out = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)  # noqa: SIM115 (returned open)
    regular: set[str] = set()
    leaves: set[str] = set()
    """Members nothing may lie below: links, files."""
    seen: set[str] = set()
    try:
        with (
            tarfile.open(fileobj=raw, mode="r|") as source,
            tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as sink,
        ):
            for member in source:
                name = _checked(member.name, tops, leaves)
                if name in seen:  # a second member would replace the first as tar unpacks
                    raise _invalid(f"{name!r} twice")
                seen.add(name)
                copy = tarfile.TarInfo(name)
                copy.mode, copy.uid, copy.gid = member.mode & 0o7777, member.uid, member.gid
                copy.mtime = member.mtime
                if member.isreg():
                    copy.size = member.size
                    sink.addfile(copy, source.extractfile(member))
                    regular.add(name)
                elif member.isdir():
                    copy.type = tarfile.DIRTYPE
                    sink.addfile(copy)
                    continue
                elif member.issym() or member.islnk():
                    copy.type, copy.linkname = member.type, member.linkname
                    if member.islnk() and _normal(member.linkname) not in regular:
                        raise _invalid(f"a hard link {name} to {member.linkname!r}")
                    if member.islnk():
                        copy.linkname = _normal(member.linkname)
                    sink.addfile(copy)
                else:
                    continue  # a device, fifo or socket: not the agent's work
                leaves.add(name)
    except tarfile.TarError as exc:
        out.close()
        raise _invalid(str(exc)) from exc
    except BaseException:
        out.close()
        raise
    out.seek(0)
    return out


def _checked(name: str, tops: list[str], leaves: set[str]) -> str:
    """The member's name, if it lies at or below a top and below no link or file."""
    normal = _normal(name)
    if normal != name.rstrip("/") or not any(
        normal == top or normal.startswith(f"{top}/") for top in tops
    ):
        raise _invalid(f"a member {name!r} outside the paths carried")
    parts = normal.split("/")
    for depth in range(1, len(parts)):
        if "/".join(parts[:depth]) in leaves:
            raise _invalid(f"a member {name!r} below a link or a file")
    return normal


def _normal(name: str) -> str:
    normal = posixpath.normpath(name)
    return "" if normal.startswith(("/", "..")) or normal == "." else normal


def _invalid(what: str) -> VerifierError:
    return VerifierError(f"the agent's paths could not be carried: the archive holds {what}")
