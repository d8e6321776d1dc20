"""Leak-proofing of the E2B backend against the fake E2B cloud: kill on every path, cancel
during create, the startup sweep, retries of transient errors, the live cap, the create-rate
limit, and a missing or wrong API key."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.engine.checks import SpecChecks
from service.engine.events import EventHub
from service.engine.model_access import ModelRouter
from service.engine.recovery import end_interrupted
from service.engine.verification import verifier_sandbox_label
from service.errors import RolloutFailure, SandboxError, SpecError
from service.models import (
    AgentSpec,
    ErrorKind,
    Rollout,
    RolloutSpec,
    RolloutStatus,
    SandboxSpec,
    TaskSpec,
)
from service.proxy.server import CaptureProxy
from service.registry import load_backend
from service.sandboxes.e2b.backend import ROLLOUT_LABEL, E2BBackend
from service.store.sqlite import SqliteStore
from testing.e2b_support import (
    FAST_RETRY,
    eventually,
    make_backend,
    make_request,
    make_settings,
)
from testing.fakes.e2b_cloud import FakeE2B


@pytest.fixture
async def backend(cloud: FakeE2B, tmp_path: Path) -> AsyncIterator[E2BBackend]:
    backend = make_backend(tmp_path, e2b_max_sandboxes=4)
    yield backend
    await backend.close()


async def test_kill_is_idempotent(backend: E2BBackend, cloud: FakeE2B) -> None:
    sandbox = await backend.create(make_request())
    await sandbox.kill()
    await sandbox.kill()
    assert cloud.live_ids() == set()
    assert len(cloud.records) == 1


async def test_kill_finishes_even_when_its_caller_is_cancelled(
    backend: E2BBackend, cloud: FakeE2B
) -> None:
    sandbox = await backend.create(make_request())
    killer = asyncio.create_task(sandbox.kill())
    await asyncio.sleep(0)
    killer.cancel()
    await sandbox.kill()  # joins the kill already under way
    assert cloud.live_ids() == set()


async def test_close_kills_every_live_sandbox(backend: E2BBackend, cloud: FakeE2B) -> None:
    await asyncio.gather(*(backend.create(make_request(f"r{i}")) for i in range(3)))
    assert len(cloud.live_ids()) == 3
    await backend.close()
    assert cloud.live_ids() == set()


async def test_cancel_during_create_kills_the_sandbox_once_its_id_is_known(
    backend: E2BBackend, cloud: FakeE2B
) -> None:
    cloud.hold_creates()
    create = asyncio.create_task(backend.create(make_request()))
    await asyncio.wait_for(cloud.create_arrived.wait(), 10)
    create.cancel()
    with pytest.raises(asyncio.CancelledError):
        await create
    cloud.release_creates()
    await eventually(lambda: len(cloud.records) == 1 and not cloud.live_ids())


async def test_a_failed_setup_after_create_kills_the_sandbox(
    backend: E2BBackend, cloud: FakeE2B, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*paths: str) -> None:
        raise SandboxError("prepare failed")

    monkeypatch.setattr("service.sandboxes.e2b.sandbox.E2BSandbox.make_dirs", broken)
    with pytest.raises(SandboxError, match="prepare failed"):
        await backend.create(make_request())
    assert len(cloud.records) == 1
    assert cloud.live_ids() == set()


async def test_sweep_kills_only_this_instances_orphans(cloud: FakeE2B, tmp_path: Path) -> None:
    crashed = make_backend(tmp_path)  # an earlier run that died without killing anything
    live = await crashed.create(make_request("still-running"))
    orphan = await crashed.create(make_request("finished-long-ago"))
    other = await make_backend(tmp_path, instance_id="other").create(make_request("theirs"))

    restarted = make_backend(tmp_path)
    assert await restarted.sweep_orphans({"still-running"}) == 1
    assert cloud.live_ids() == {live.id, other.id}
    assert orphan.id not in cloud.live_ids()
    assert cloud.records[live.id].metadata[ROLLOUT_LABEL] == "still-running"


async def test_sweep_deletes_this_instances_snapshots_no_group_holds(
    backend: E2BBackend, cloud: FakeE2B, tmp_path: Path
) -> None:
    crashed = make_backend(tmp_path)  # a run that died mid-group, its snapshot taken
    other = make_backend(tmp_path, instance_id="default-2")  # another instance's
    snapshots = []
    for owner, name in ((crashed, "g1-template"), (other, "g2-template"), (backend, "g3-template")):
        template = await owner.create(make_request(name))
        snapshots.append(await owner.snapshot(template))
        await template.kill()
    left, theirs, held = snapshots
    await backend.sweep_orphans(set())
    assert cloud.template_ids() >= {theirs.snapshot_id, held.snapshot_id}
    assert left.snapshot_id not in cloud.template_ids()
    await held.release()
    assert held.snapshot_id not in cloud.template_ids()


async def test_sweep_spares_sandboxes_the_backend_holds(
    backend: E2BBackend, cloud: FakeE2B
) -> None:
    held = await backend.create(make_request("just-created"))
    assert await backend.sweep_orphans(set()) == 0
    assert cloud.live_ids() == {held.id}


async def test_transient_create_errors_are_retried_under_one_idempotency_key(
    backend: E2BBackend, cloud: FakeE2B
) -> None:
    cloud.fail_creates(429, 503, "reset")
    sandbox = await backend.create(make_request())
    assert len(cloud.create_bodies) == 4
    assert len({body["_idempotency_key"] for body in cloud.create_bodies}) == 1
    assert cloud.live_ids() == {sandbox.id}


async def test_create_gives_up_after_the_bound_with_a_sandbox_error(
    cloud: FakeE2B, tmp_path: Path
) -> None:
    backend = make_backend(tmp_path, e2b_max_sandboxes=1)
    cloud.fail_creates(*([500] * FAST_RETRY.attempts))
    with pytest.raises(SandboxError) as caught:
        await backend.create(make_request())
    assert caught.value.kind is ErrorKind.SANDBOX
    assert len(cloud.create_bodies) == FAST_RETRY.attempts
    await asyncio.wait_for(backend.create(make_request()), 10)  # the slot was given back
    await backend.close()


async def test_errors_that_are_not_transient_are_not_retried(
    backend: E2BBackend, cloud: FakeE2B
) -> None:
    cloud.fail_creates(400)
    with pytest.raises(SandboxError, match="400"):
        await backend.create(make_request(template="no-such-template"))
    assert len(cloud.create_bodies) == 1


async def test_live_cap_makes_creates_wait_for_a_kill(cloud: FakeE2B, tmp_path: Path) -> None:
    backend = make_backend(tmp_path, e2b_max_sandboxes=2)
    first, _ = await asyncio.gather(*(backend.create(make_request(f"r{i}")) for i in range(2)))
    third = asyncio.create_task(backend.create(make_request("r2")))
    done, _ = await asyncio.wait({third}, timeout=0.5)
    assert not done
    assert len(cloud.records) == 2
    await first.kill()
    await asyncio.wait_for(third, 10)
    assert len(cloud.live_ids()) == 2
    await backend.close()


async def test_creates_are_spaced_by_the_rate_limit(cloud: FakeE2B, tmp_path: Path) -> None:
    backend = make_backend(tmp_path, e2b_creates_per_s=10.0)
    started = time.monotonic()
    await asyncio.gather(*(backend.create(make_request(f"r{i}")) for i in range(4)))
    assert time.monotonic() - started >= 3 / 10.0  # the 4th create waits for its turn
    await backend.close()


async def test_missing_api_key_is_a_clear_error_and_the_backend_still_loads(
    cloud: FakeE2B, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("E2B_API_KEY")
    backend = load_backend("e2b", make_settings(tmp_path))
    assert isinstance(backend, E2BBackend)
    with pytest.raises(SpecError) as caught:
        backend.check_ready()
    violation = caught.value.violations[0]
    assert violation.field == "spec.sandbox.backend"
    assert "E2B_API_KEY is not set" in violation.description
    with pytest.raises(RolloutFailure) as failed:
        await backend.create(make_request())
    assert failed.value.kind is ErrorKind.INVALID_SPEC
    assert await backend.sweep_orphans(set()) == 0
    assert cloud.create_bodies == []


async def test_a_rejected_api_key_fails_at_once_without_leaking_it(
    cloud: FakeE2B, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("E2B_API_KEY", "e2b_wrong_key_0123456789")
    backend = make_backend(tmp_path)
    backend.check_ready()
    with pytest.raises(SandboxError) as caught:
        await backend.create(make_request())
    assert "e2b_wrong_key_0123456789" not in str(caught.value)
    assert cloud.create_bodies == []  # refused before the create handler: 401


async def test_a_takeover_kills_an_interrupted_rollouts_verifier_sandbox_too(
    cloud: FakeE2B, tmp_path: Path
) -> None:
    """A replica died mid-verify: its FRESH verifier's sandbox, labelled apart from the
    agent's, goes with the rollout another server ends as interrupted."""
    gone = make_backend(tmp_path, instance_id="gone")
    await gone.create(make_request("r1"))
    await gone.create(make_request(verifier_sandbox_label("r1")))
    untouched = await gone.create(make_request("r2"))
    spec = RolloutSpec(
        task=TaskSpec(instruction="x", verify=("true",)),
        agent=AgentSpec(name="command", command="true"),
        sandbox=SandboxSpec(backend="e2b"),
    )
    settings = make_settings(tmp_path)
    taking_over = make_backend(tmp_path)
    async with SqliteStore(tmp_path / "rollouts.db") as store:
        rollout = Rollout(id="r1", spec=spec, create_time=datetime.now(UTC))
        rollout.status = RolloutStatus.RUNNING
        await store.insert(rollout)
        checks = SpecChecks(
            settings, ModelRouter(CaptureProxy(settings), {}, settings), {"e2b": taking_over}
        )
        hub = EventHub(store)
        await hub.start()
        try:
            ended = await end_interrupted(store, hub, checks, default_backend="local")
        finally:
            await hub.stop()
    await taking_over.close()

    assert ended == 1
    assert cloud.live_ids() == {untouched.id}
