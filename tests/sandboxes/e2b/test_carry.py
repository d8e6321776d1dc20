"""The agent's paths on their way to a FRESH verifier's sandbox on E2B: the archive its
sandbox's tar wrote (the agent's program) is data, rebuilt member by member (`repack`);
what would land outside the paths carried, or through a link, fails the carry."""

from __future__ import annotations

import io
import tarfile

import pytest

from service.errors import VerifierError
from service.sandboxes.e2b.carry import repack


def _member(
    name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **fields: object
) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, len(data)
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data


def _archive(*members: tuple[tarfile.TarInfo, bytes]) -> io.BytesIO:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if info.isreg() else None)
    raw.seek(0)
    return raw


def test_files_directories_and_links_keep_their_modes_and_owners_other_kinds_are_dropped() -> None:
    raw = _archive(
        _member("app", tarfile.DIRTYPE, mode=0o750, uid=1000, gid=1000),
        _member("app/run.sh", data=b"echo hi\n", mode=0o4755, uid=0, gid=0),
        _member("app/ln", tarfile.SYMTYPE, linkname="/etc/passwd"),
        _member("app/hard", tarfile.LNKTYPE, linkname="app/run.sh"),
        _member("app/fifo", tarfile.FIFOTYPE),
        _member("app/dev", tarfile.CHRTYPE, devmajor=1, devminor=3),
    )

    with tarfile.open(fileobj=repack(raw, ("/app",)), mode="r") as out:
        members = {member.name: member for member in out}
        script = out.extractfile("app/run.sh")
        assert script is not None
        assert script.read() == b"echo hi\n"

    assert sorted(members) == ["app", "app/hard", "app/ln", "app/run.sh"]
    assert (members["app"].mode, members["app"].uid, members["app"].gid) == (0o750, 1000, 1000)
    assert members["app/run.sh"].mode == 0o4755
    assert members["app/ln"].issym()
    assert members["app/ln"].linkname == "/etc/passwd"
    assert members["app/hard"].islnk()
    assert members["app/hard"].linkname == "app/run.sh"


@pytest.mark.parametrize(
    "members",
    [
        [_member("etc/pip.conf", data=b"x")],
        [_member("app/../etc/pip.conf", data=b"x")],
        [_member("/app/x", data=b"x")],
        [_member("application/x", data=b"x")],
        [_member("app/ln", tarfile.SYMTYPE, linkname="/usr"), _member("app/ln/x", data=b"x")],
        [_member("app/f", data=b"x"), _member("app/f/x", data=b"x")],
        [_member("app/hard", tarfile.LNKTYPE, linkname="etc/shadow")],
        [_member("app/ln", tarfile.SYMTYPE, linkname="/usr"), _member("app/ln", data=b"x")],
    ],
    ids=[
        "outside",
        "dot-dot",
        "absolute",
        "a-sibling",
        "below-a-link",
        "below-a-file",
        "hard-link-out",
        "twice",
    ],
)
def test_a_member_that_would_land_outside_or_through_a_link_fails_the_carry(
    members: list[tuple[tarfile.TarInfo, bytes]],
) -> None:
    with pytest.raises(VerifierError, match="could not be carried"):
        repack(_archive(*members), ("/app",))


def test_bytes_that_are_no_archive_fail_the_carry() -> None:
    with pytest.raises(VerifierError, match="could not be carried"):
        repack(io.BytesIO(b"not a tar" * 100), ("/app",))
