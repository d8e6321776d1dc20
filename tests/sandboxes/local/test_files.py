"""Files in and out of a local sandbox: round trips, bad paths, planted symlinks."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.config import Settings
from service.sandboxes.base import WORKDIR
from service.sandboxes.local.backend import LocalSandbox


async def test_files_round_trip(local_sandbox: LocalSandbox) -> None:
    await local_sandbox.write_files(
        {f"{WORKDIR}/src/deep/a.txt": b"alpha\n", "/tmp/b.bin": bytes(range(256))}
    )
    result = await local_sandbox.exec("cat src/deep/a.txt && wc -c < /tmp/b.bin", timeout_s=30)
    assert result.stdout == "alpha\n256\n"
    assert await local_sandbox.read_file("/tmp/b.bin", max_bytes=1000) == bytes(range(256))
    assert await local_sandbox.read_file(f"{WORKDIR}/src/deep/a.txt", max_bytes=3) == b"alp"
    assert await local_sandbox.read_file(f"{WORKDIR}/missing", max_bytes=10) is None


async def test_written_files_belong_to_the_sandbox_user(local_sandbox: LocalSandbox) -> None:
    await local_sandbox.write_files({f"{WORKDIR}/made/by/host.txt": b"one\n"})
    result = await local_sandbox.exec(
        "echo two >> made/by/host.txt && touch made/by/new && cat made/by/host.txt",
        timeout_s=30,
    )
    assert (result.exit_code, result.stdout) == (0, "one\ntwo\n"), result.stderr


async def test_reads_what_a_command_wrote(local_sandbox: LocalSandbox) -> None:
    await local_sandbox.exec(
        "mkdir -p ../logs/verifier && echo 0.75 > ../logs/verifier/reward.txt", timeout_s=30
    )
    assert (
        await local_sandbox.read_file("/home/user/logs/verifier/reward.txt", max_bytes=64)
        == b"0.75\n"
    )


async def test_overwrite_truncates(local_sandbox: LocalSandbox) -> None:
    await local_sandbox.write_files({f"{WORKDIR}/f": b"a long first version"})
    await local_sandbox.write_files({f"{WORKDIR}/f": b"short"})
    assert await local_sandbox.read_file(f"{WORKDIR}/f", max_bytes=100) == b"short"


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "relative/path", "/home/user/../../etc/passwd", "/home/user", "/tmp"]
)
async def test_paths_outside_home_and_tmp_are_refused(
    local_sandbox: LocalSandbox, path: str
) -> None:
    with pytest.raises(ValueError, match="sandbox path"):
        await local_sandbox.write_files({path: b"x"})
    with pytest.raises(ValueError, match="sandbox path"):
        await local_sandbox.read_file(path, max_bytes=10)


async def test_read_never_follows_a_planted_symlink(
    local_settings: Settings, local_sandbox: LocalSandbox
) -> None:
    (local_settings.state_dir / "rollouts.db").write_bytes(b"the service's database")
    plant = f"ln -s /etc/shadow shadow; ln -s {local_settings.state_dir} state; ln -s / root"
    await local_sandbox.exec(plant, timeout_s=30)
    for planted in ("shadow", "state/rollouts.db", "root/etc/shadow", "root/etc/hostname"):
        assert await local_sandbox.read_file(f"{WORKDIR}/{planted}", max_bytes=4096) is None


async def test_write_never_follows_a_planted_symlink(
    local_settings: Settings, local_sandbox: LocalSandbox, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"host file")
    await local_sandbox.exec(
        f"ln -s {outside} tests; ln -s {victim} notes.txt; ln -s {local_settings.state_dir} state",
        timeout_s=30,
    )
    await local_sandbox.write_files(
        {
            f"{WORKDIR}/tests/test_x.py": b"verifier",
            f"{WORKDIR}/notes.txt": b"staged",
            f"{WORKDIR}/state/rollouts.db": b"overwritten?",
        }
    )
    assert list(outside.iterdir()) == []
    assert victim.read_bytes() == b"host file"
    assert not (local_settings.state_dir / "rollouts.db").exists()
    result = await local_sandbox.exec(
        "cat tests/test_x.py notes.txt; test -L tests || echo real", timeout_s=30
    )
    assert result.stdout == "verifierstagedreal\n"
