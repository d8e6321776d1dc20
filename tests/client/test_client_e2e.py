"""The sync and asyncio clients against the real server (local bwrap sandboxes)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout_client import (
    AsyncRolloutClient,
    InvalidArgumentError,
    NotFoundError,
    RolloutClient,
)

pytestmark = pytest.mark.e2e


def copy_spec(**labels: str) -> dict[str, Any]:
    """The spec of the brief: reward 1 once the agent has copied a.txt to b.txt."""
    return {
        "task": {
            "instruction": "copy a.txt to b.txt",
            "setup": ["echo hi > a.txt"],
            "verify": ["test -f b.txt"],
        },
        "agent": {"name": "command", "command": "cat a.txt > b.txt; echo copied"},
        "labels": labels,
    }


def sleeping_spec(**labels: str) -> dict[str, Any]:
    return {
        "task": {"instruction": "wait"},
        "agent": {"name": "command", "command": "echo sleeping; sleep 60"},
        "labels": labels,
    }


def unique() -> str:
    return uuid.uuid4().hex[:12]


def test_sync_run_returns_the_full_result(server_target: str) -> None:
    with RolloutClient(server_target) as client:
        rollout = client.run(copy_spec())
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.reward == 1.0
    assert [r.exit_code for r in rollout.result.verify_results] == [0]
    assert rollout.result.files["b.txt"] == b"hi\n"
    assert "copied" in rollout.result.agent_log_tail


def test_sync_start_watch_get_list(server_target: str) -> None:
    run_label = unique()
    with RolloutClient(server_target) as client:
        started = client.start(copy_spec(run=run_label))
        events = list(client.watch(started.id))
        got = client.get(started.id, view="slim")
        listed = list(client.list_all(labels={"run": run_label}, statuses=["succeeded"]))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert {e.rollout_id for e in events} == {started.id}
    assert events[-1].WhichOneof("payload") == "finished"
    assert events[-1].finished.status == pb.ROLLOUT_STATUS_SUCCEEDED
    phases = [e.phase.phase for e in events if e.HasField("phase")]
    assert phases.index(pb.PHASE_SETUP) < phases.index(pb.PHASE_AGENT)
    assert phases.index(pb.PHASE_AGENT) < phases.index(pb.PHASE_VERIFYING)
    assert got.result.reward == 1.0
    assert not got.result.files, "the slim view leaves files out"
    assert [r.id for r in listed] == [started.id]


def test_watch_resumes_after_a_seq(server_target: str) -> None:
    with RolloutClient(server_target) as client:
        rollout = client.run(copy_spec())
        every = list(client.watch(rollout.id))
        rest = list(client.watch(rollout.id, after_seq=2))
    assert rest == every[2:]


async def test_async_start_watch_and_pages(server_target: str) -> None:
    run_label = unique()
    async with AsyncRolloutClient(server_target) as client:
        first = await client.start(copy_spec(run=run_label))
        second = await client.start(copy_spec(run=run_label))
        for rollout in (first, second):
            events = [event async for event in client.watch(rollout.id)]
            assert events[-1].finished.status == pb.ROLLOUT_STATUS_SUCCEEDED
        page = await client.list(labels={"run": run_label}, page_size=1)
        listed = [r.id async for r in client.list_all(labels={"run": run_label}, page_size=1)]
    assert len(page.rollouts) == 1
    assert page.next_page_token
    assert listed == [second.id, first.id], "newest first, across pages"


async def test_async_cancel_mid_agent(server_target: str) -> None:
    async with AsyncRolloutClient(server_target) as client:
        started = await client.start(sleeping_spec())
        events = client.watch(started.id)
        async for event in events:
            if event.phase.phase == pb.PHASE_AGENT:
                break
        await events.aclose()
        await client.cancel(started.id, "test over")
        finished = [e async for e in client.watch(started.id)][-1].finished
    assert finished.status == pb.ROLLOUT_STATUS_CANCELLED
    assert finished.result.error.kind == pb.ERROR_KIND_CANCELLED
    assert "test over" in finished.result.error.message


async def test_async_run_is_cancelled_with_its_task(server_target: str) -> None:
    run_label = unique()
    async with AsyncRolloutClient(server_target) as client:
        task = asyncio.create_task(client.run(sleeping_spec(run=run_label)))
        [rollout] = await _wait_for_listed(client, run_label)
        async for event in client.watch(rollout.id):
            if event.phase.phase == pb.PHASE_AGENT:
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        events = [e async for e in client.watch(rollout.id)]
    assert events[-1].finished.status == pb.ROLLOUT_STATUS_CANCELLED


async def _wait_for_listed(client: AsyncRolloutClient, run_label: str) -> list[pb.Rollout]:
    # Polls the server: RunRollout does not say the rollout's id before it ends.
    while not (page := await client.list(labels={"run": run_label})).rollouts:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    return list(page.rollouts)


def test_real_errors_name_the_field_and_the_id(server_target: str) -> None:
    with RolloutClient(server_target) as client:
        with pytest.raises(InvalidArgumentError) as caught:
            client.start({"task": {"instruction": ""}, "agent": {"name": "command"}})
        with pytest.raises(NotFoundError):
            client.get("no-such-rollout")
    assert "spec.task.instruction" in [v.field for v in caught.value.field_violations]
