"""Collecting a workdir into a result, from a real local sandbox: order, bounds, omissions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.config import Settings
from service.engine import collect
from service.engine.collect import collect_workdir
from service.models import SandboxSpec
from service.sandboxes.base import HOME, WORKDIR, SandboxRequest
from service.sandboxes.local.backend import LocalBackend, LocalSandbox


def make_settings(tmp_path: Path, **bounds: int) -> Settings:
    return Settings.model_validate(
        {"state_dir": tmp_path / "state", "cache_dir": tmp_path / "cache", **bounds}
    )


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[LocalSandbox]:
    backend = LocalBackend(make_settings(tmp_path))
    sandbox = await backend.create(SandboxRequest("collect", SandboxSpec(), 300.0))
    yield sandbox
    await sandbox.kill()
    await backend.close()


async def test_collects_in_path_order_within_the_bounds(
    sandbox: LocalSandbox, tmp_path: Path
) -> None:
    await sandbox.write_files(
        {
            f"{WORKDIR}/a.txt": b"a" * 10,
            f"{WORKDIR}/b/huge.bin": b"h" * 600,
            f"{WORKDIR}/b/c.txt": b"c" * 300,
            f"{WORKDIR}/d.txt": b"d" * 300,
            f"{WORKDIR}/e.txt": b"e",
            f"{WORKDIR}/f.txt": b"f",
            f"{WORKDIR}/tests/test_x.py": b"verifier",
        }
    )
    await sandbox.exec("ln -s /etc/hostname host && ln -s b b-link", timeout_s=30)
    settings = make_settings(
        tmp_path, collect_max_files=3, collect_max_file_bytes=500, collect_max_total_bytes=400
    )
    collected = await collect_workdir(sandbox, settings, exclude={"tests/test_x.py"})
    # huge.bin is over the per-file bound, d.txt over the total, f.txt over the count.
    assert collected.files == {"a.txt": b"a" * 10, "b/c.txt": b"c" * 300, "e.txt": b"e"}
    assert collected.omitted == ["b/huge.bin", "d.txt", "f.txt"]


async def test_omitted_paths_are_bounded(
    sandbox: LocalSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(collect, "MAX_OMITTED", 5)
    await sandbox.write_files({f"{WORKDIR}/f{i:04}": b"x" for i in range(2000)})
    settings = make_settings(tmp_path, collect_max_files=3)
    collected = await collect_workdir(sandbox, settings, exclude={"f0001"})
    assert list(collected.files) == ["f0000", "f0002", "f0003"]
    assert collected.omitted == ["f0004", "f0005", "f0006", "f0007", "f0008"]


async def test_the_agents_state_dirs_are_skipped_without_using_up_the_listing(
    sandbox: LocalSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A workdir at HOME holds the harness's own directories (here WORKDIR stands for it, as
    # a bare sandbox lists only beneath HOME); they sort first (".o" < "a").
    monkeypatch.setattr(collect, "MAX_OMITTED", 0)
    state = {f"{WORKDIR}/.opencode-xdg/data/{i:03}": b"s" for i in range(40)}
    await sandbox.write_files(
        state | {f"{WORKDIR}/.opencode-npm/bin/opencode": b"x", f"{WORKDIR}/answer.txt": b"42"}
    )
    settings = make_settings(tmp_path, collect_max_files=2)
    skip = (f"{WORKDIR}/.opencode-xdg", f"{WORKDIR}/.opencode-npm", f"{HOME}/.elsewhere")

    collected = await collect_workdir(sandbox, settings, exclude=set(), skip_dirs=skip)

    # Filtering them out after listing would have listed state only: the answer never seen.
    assert collected.files == {"answer.txt": b"42"}
    assert collected.omitted == []
