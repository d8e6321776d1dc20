"""The real `HarborTasks` on a real state directory: build contexts are removed past their TTL
or the byte budget, never while in use, and written again when their task comes back.

Tasks are admitted for E2B (their Dockerfile becomes a template built at sandbox creation),
which writes the context without the image store; the local backend writes the same one.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from service.config import Settings
from service.errors import SandboxError
from service.harbor.mapping import task_image_name
from service.harbor.tasks import HarborTasks
from service.images.dockerfile import context_digest
from service.models import HarborTaskSpec, RolloutSpec, SandboxSpec, TaskSpec
from service.sandboxes.local.backend import LocalBackend

TASKS = Path(__file__).parent / "tasks"
_DAY_S = 86400.0


@pytest.fixture
def task_root(tmp_path: Path) -> Path:
    """Three tasks whose environment holds 600 KiB of their own."""
    root = tmp_path / "tasks"
    for name in ("a", "b", "c"):
        shutil.copytree(TASKS / "multi_reward", root / name)
        (root / name / "environment" / "data.bin").write_bytes(name.encode() * 600 * 1024)
    return root


def _tasks(tmp_path: Path, task_root: Path, **settings: Any) -> HarborTasks:
    return HarborTasks(
        Settings(
            state_dir=tmp_path / "state",
            cache_dir=tmp_path / "cache",
            task_roots=[task_root],
            **settings,
        )
    )


def _spec(harbor: HarborTaskSpec, sandbox: SandboxSpec) -> RolloutSpec:
    return RolloutSpec(task=TaskSpec(instruction=""), harbor_task=harbor, sandbox=sandbox)


async def _no_check(_: SandboxSpec) -> None:
    raise AssertionError("a task's own template is not checked at admission")


async def _admit(tasks: HarborTasks, path: str) -> RolloutSpec:
    """Admit in a task of its own, as an RPC does: its hold ends with it."""
    spec = _spec(HarborTaskSpec(path=path), SandboxSpec(backend="e2b"))
    return await asyncio.create_task(tasks.resolve(spec, _no_check, LocalBackend.capabilities))


def _contexts(tmp_path: Path) -> set[str]:
    return {p.name for p in (tmp_path / "state" / "harbor").iterdir()}


def _age(tmp_path: Path, digest: str, seconds: float) -> None:
    """Make the context's last use `seconds` ago."""
    then = time.time() - seconds
    os.utime(tmp_path / "state" / "harbor" / digest, (then, then))


async def test_contexts_unused_past_the_ttl_are_removed(tmp_path: Path, task_root: Path) -> None:
    tasks = _tasks(tmp_path, task_root, harbor_context_ttl_s=_DAY_S)
    old = (await _admit(tasks, "a")).harbor_task
    recent = (await _admit(tasks, "b")).harbor_task
    assert old is not None
    assert recent is not None
    _age(tmp_path, old.digest, 2 * _DAY_S)
    _age(tmp_path, recent.digest, _DAY_S / 2)
    crashed = tmp_path / "state" / "harbor" / f".{old.digest}.0.removed"  # set aside, then a crash
    (crashed / "environment").mkdir(parents=True)
    assert await tasks.contexts.sweep() == [old.digest]
    assert _contexts(tmp_path) == {recent.digest}


async def test_over_the_budget_the_least_recently_used_go_first(
    tmp_path: Path, task_root: Path
) -> None:
    tasks = _tasks(tmp_path, task_root, harbor_contexts_max_mb=2)  # three of 600 KiB fit
    digests = []
    for age_s, name in ((300.0, "a"), (200.0, "b"), (100.0, "c")):
        resolved = (await _admit(tasks, name)).harbor_task
        assert resolved is not None
        _age(tmp_path, resolved.digest, age_s)
        digests.append(resolved.digest)
    assert _contexts(tmp_path) == set(digests)
    (task_root / "d").mkdir()  # a fourth task, written at admission: over the budget
    shutil.copytree(task_root / "c", task_root / "d", dirs_exist_ok=True)
    (task_root / "d" / "environment" / "data.bin").write_bytes(b"d" * 600 * 1024)
    fourth = (await _admit(tasks, "d")).harbor_task
    assert fourth is not None
    assert _contexts(tmp_path) == {digests[1], digests[2], fourth.digest}  # `a`, oldest, went


async def test_a_context_in_use_is_never_removed(tmp_path: Path, task_root: Path) -> None:
    """Held by the call admitting it, then by the live rollout naming it (the engine's
    `add_users`), until the rollout ends; then the sweep removes it."""
    tasks = _tasks(tmp_path, task_root, harbor_context_ttl_s=1.0, harbor_contexts_max_mb=1)
    live: list[RolloutSpec] = []
    tasks.add_users(lambda: live)
    admitted, launch = asyncio.Event(), asyncio.Event()
    spec = _spec(HarborTaskSpec(path="a"), SandboxSpec(backend="e2b"))

    async def admission() -> RolloutSpec:
        resolved = await tasks.resolve(spec, _no_check, LocalBackend.capabilities)
        admitted.set()
        await launch.wait()  # e.g. capacity and the store's insert, before the rollout is live
        live.append(resolved)
        return resolved

    admitting = asyncio.create_task(admission())
    await admitted.wait()
    digest = _only(tmp_path)
    _age(tmp_path, digest, 60.0)
    assert await tasks.contexts.sweep() == []  # held by the call still admitting it
    launch.set()
    resolved = await admitting
    _age(tmp_path, digest, 60.0)
    assert await tasks.contexts.sweep() == []  # held by the live rollout
    assert _contexts(tmp_path) == {digest}
    live.clear()  # the rollout ended
    assert await tasks.contexts.sweep() == [digest]
    assert _contexts(tmp_path) == set()
    assert resolved.harbor_task is not None
    assert resolved.harbor_task.digest == digest


def _only(tmp_path: Path) -> str:
    (digest,) = _contexts(tmp_path)
    return digest


async def test_a_task_admitted_after_its_context_was_removed_gets_it_back(
    tmp_path: Path, task_root: Path
) -> None:
    tasks = _tasks(tmp_path, task_root, harbor_context_ttl_s=1.0)
    first = (await _admit(tasks, "a")).harbor_task
    assert first is not None
    context = tmp_path / "state" / "harbor" / first.digest / "environment"
    key = context_digest(context)  # what the image store's build key reads of it
    _age(tmp_path, first.digest, 60.0)
    assert await tasks.contexts.sweep() == [first.digest]
    again = (await _admit(tasks, "a")).harbor_task
    assert again is not None
    assert again.digest == first.digest
    assert context_digest(context) == key


async def test_a_missing_context_is_read_again_from_the_task_root(
    tmp_path: Path, task_root: Path
) -> None:
    """As on a replica that takes over a group another one admitted."""
    admitting = _tasks(tmp_path / "one", task_root)
    resolved = await _admit(admitting, "a")
    harbor = resolved.harbor_task
    assert harbor is not None
    other = _tasks(tmp_path / "two", task_root)
    messages: list[str] = []
    context = await other._context(resolved, messages.append)
    assert context == tmp_path / "two" / "state" / "harbor" / harbor.digest / "environment"
    assert context_digest(context) == context_digest(
        tmp_path / "one" / "state" / "harbor" / harbor.digest / "environment"
    )
    assert messages == ["the task's build context is not on this server: reading a again"]
    (task_root / "a" / "environment" / "data.bin").write_bytes(b"changed")
    shutil.rmtree(context.parent)
    with pytest.raises(SandboxError, match=r"spec\.harbor_task\.path 'a' changed"):
        await other._context(resolved, messages.append)


async def test_an_uploaded_tasks_missing_context_names_the_archive(
    tmp_path: Path, task_root: Path
) -> None:
    tasks = _tasks(tmp_path, task_root)
    digest = "0" * 64
    spec = _spec(HarborTaskSpec(digest=digest), SandboxSpec(image=task_image_name(digest)))
    with pytest.raises(SandboxError, match=r"\(spec.harbor_task.archive\) is not on this server"):
        await tasks.build_image(spec, lambda _: None)


@pytest.mark.parametrize(
    ("env", "value"),
    [
        ("ROLLOUT_HARBOR_CONTEXT_TTL_S", "0"),
        ("ROLLOUT_HARBOR_CONTEXT_TTL_S", "-5"),
        ("ROLLOUT_HARBOR_CONTEXT_TTL_S", "soon"),
        ("ROLLOUT_HARBOR_CONTEXTS_MAX_MB", "0"),
        ("ROLLOUT_HARBOR_CONTEXTS_MAX_MB", "1.5"),
    ],
)
def test_bad_settings_are_refused_naming_them(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str
) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ValidationError, match=env.removeprefix("ROLLOUT_").lower()):
        Settings()
