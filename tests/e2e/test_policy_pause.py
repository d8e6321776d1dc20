"""Through the real server: policy versions on turns, and pausing model calls for a weight sync.

Each test has its own scripted upstream (its own port, so an endpoint selector reaches only
its rollouts) or its own labels. A reply with `hold` keeps a call in flight at the upstream
until the test releases it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc
from rollout_client import AsyncRolloutClient, InvalidArgumentError, RolloutClient

from testing.fakes.llm_upstream import FakeUpstream, Reply
from testing.server_process import ServerProcess, running
from testing.specs import command_spec, model_calls
from tests.e2e.auth_support import ADMIN_TOKEN, TENANT_A_TOKEN, TENANT_B_TOKEN, bearer
from tests.e2e.bad_request import violated_fields

pytestmark = pytest.mark.e2e

MODEL = "policy-under-training"


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(model=MODEL) as upstream:
        yield upstream


def by_endpoint(upstream: FakeUpstream) -> pb.ModelCallSelector:
    return pb.ModelCallSelector(endpoint=pb.EndpointSelector(base_url=upstream.base_url))


def by_labels(labels: dict[str, str]) -> pb.ModelCallSelector:
    return pb.ModelCallSelector(labels=pb.LabelSelector(labels=labels))


def spec(upstream: FakeUpstream, calls: int, **fields: Any) -> pb.RolloutSpec:
    return command_spec(
        model_calls(calls),
        verify=("test -f done",),
        endpoint={"base_url": upstream.base_url, "model": MODEL},
        **fields,
    )


async def start(stub: pb_grpc.RolloutServiceAsyncStub, message: pb.RolloutSpec) -> str:
    response = await stub.StartRollout(pb.StartRolloutRequest(spec=message))
    return response.rollout.id


async def events_until(
    stub: pb_grpc.RolloutServiceAsyncStub,
    rollout_id: str,
    found: list[pb.RolloutEvent],
    wanted: str,
) -> None:
    """Collect the rollout's events into `found` until one whose text holds `wanted`."""
    async for response in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id)):
        found.append(response.event)
        event = response.event
        if event.notice.topic == wanted or (
            event.HasField("output") and wanted in event.output.text
        ):
            return
    raise AssertionError(f"the rollout ended without {wanted!r}")


async def finished(stub: pb_grpc.RolloutServiceAsyncStub, rollout_id: str) -> pb.Rollout:
    async for response in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id)):
        if response.event.HasField("finished"):
            break
    reply = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=rollout_id))
    return reply.rollout


async def test_pause_drains_holds_new_calls_and_versions_every_turn(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    selector = by_endpoint(upstream)
    # A standing version: rollouts started later on this endpoint begin at it.
    await stub.SetPolicyVersion(pb.SetPolicyVersionRequest(selector=selector, version=1))
    upstream.script(Reply(text="first", hold=True), Reply(text="second"))
    rollout_id = await start(stub, spec(upstream, 2))
    await upstream.wait_for_requests(1)  # call 0 is in flight, held by the upstream

    pause = asyncio.ensure_future(
        stub.PauseModelCalls(pb.PauseModelCallsRequest(selector=selector))
    )
    seen: list[pb.RolloutEvent] = []
    await events_until(stub, rollout_id, seen, "model_calls.paused")
    assert not pause.done(), "the pause returned while a call was still in flight"
    moved = await stub.SetPolicyVersion(pb.SetPolicyVersionRequest(selector=selector, version=2))
    assert moved.rollouts == 1
    upstream.release()
    drained = await pause
    assert (drained.rollouts, drained.calls_finished, drained.calls_aborted) == (1, 1, 0)

    # The agent's next call waits at the proxy: it reaches the upstream only after the resume.
    await events_until(stub, rollout_id, [], "calling 1")
    await stub.SetPolicyVersion(pb.SetPolicyVersionRequest(selector=selector, version=3))
    await asyncio.sleep(0.5)  # room for a call the gate failed to hold to reach the upstream
    assert len(upstream.requests) == 1
    resumed = await stub.ResumeModelCalls(pb.ResumeModelCallsRequest(selector=selector))
    assert resumed.rollouts == 1

    rollout = await finished(stub, rollout_id)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    turns = rollout.result.turns
    assert [t.completion_text for t in turns] == ["first", "second"]
    assert [(t.policy_version_start, t.policy_version_end) for t in turns] == [(1, 2), (3, 3)]
    assert (rollout.result.policy_version_min, rollout.result.policy_version_max) == (1, 3)
    assert turns[1].paused.ToTimedelta().total_seconds() > 0
    assert rollout.result.timings.paused.ToTimedelta().total_seconds() > 0


async def test_abort_retries_the_call_after_resume_and_only_the_retry_is_a_turn(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    selector = by_endpoint(upstream)
    upstream.script(Reply(text="from the old weights", hold=True), Reply(text="from the new"))
    rollout_id = await start(stub, spec(upstream, 1))
    await upstream.wait_for_requests(1)

    request = pb.PauseModelCallsRequest(selector=selector, abort_in_flight=True)
    drained = await stub.PauseModelCalls(request)
    assert (drained.rollouts, drained.calls_finished, drained.calls_aborted) == (1, 0, 1)
    await stub.SetPolicyVersion(pb.SetPolicyVersionRequest(selector=selector, version=7))
    resumed = await stub.ResumeModelCalls(pb.ResumeModelCallsRequest(selector=selector))
    assert (resumed.rollouts, resumed.calls_released) == (1, 1)

    rollout = await finished(stub, rollout_id)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert len(upstream.requests) == 2  # the aborted call, and its retry
    [turn] = rollout.result.turns
    assert turn.completion_text == "from the new"
    assert (turn.policy_version_start, turn.policy_version_end) == (7, 7)
    assert turn.upstream_error == ""
    assert "from the new" in rollout.result.agent_log_tail
    assert "from the old" not in rollout.result.agent_log_tail


async def test_a_pause_longer_than_the_agent_timeout_does_not_time_it_out(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    labels = {"sync": uuid.uuid4().hex}
    selector = by_labels(labels)
    # Paused before the rollout starts: its route opens held, so its one call waits.
    drained = await stub.PauseModelCalls(pb.PauseModelCallsRequest(selector=selector))
    assert drained.rollouts == 0
    message = spec(upstream, 1, labels=labels, agentTimeout="2s")
    rollout_id = await start(stub, message)
    seen: list[pb.RolloutEvent] = []
    await events_until(stub, rollout_id, seen, "calling 0")
    await asyncio.sleep(3.5)  # paused past the agent's 2 s budget
    resumed = await stub.ResumeModelCalls(pb.ResumeModelCallsRequest(selector=selector))
    assert resumed.rollouts == 1

    rollout = await finished(stub, rollout_id)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.reward == 1.0
    assert rollout.result.timings.paused.ToTimedelta().total_seconds() >= 3.5
    events = [
        r.event async for r in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id))
    ]
    topics = [e.notice.topic for e in events if e.HasField("notice")]
    assert topics.count("model_calls.paused") == 1
    assert topics.count("model_calls.resumed") == 1
    assert topics.index("model_calls.paused") < topics.index("model_calls.resumed")


async def test_a_call_beyond_max_policy_lag_ends_the_rollout_policy_stale_unscored(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    selector = by_endpoint(upstream)
    await stub.SetPolicyVersion(pb.SetPolicyVersionRequest(selector=selector, version=1))
    upstream.script(Reply(text="one", hold=True), Reply(text="never sent"))
    rollout_id = await start(stub, spec(upstream, 2, maxPolicyLag="1"))
    await upstream.wait_for_requests(1)
    await stub.SetPolicyVersion(pb.SetPolicyVersionRequest(selector=selector, version=3))
    with pytest.raises(grpc.aio.AioRpcError) as going_back:
        await stub.SetPolicyVersion(pb.SetPolicyVersionRequest(selector=selector, version=2))
    assert going_back.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violated_fields(going_back.value) == ["version"]
    upstream.release()

    rollout = await finished(stub, rollout_id)
    assert rollout.status == pb.ROLLOUT_STATUS_FAILED
    assert rollout.result.error.kind == pb.ERROR_KIND_POLICY_STALE
    assert not rollout.result.HasField("reward")
    assert not rollout.result.verify_results  # never verified, never scored
    assert len(upstream.requests) == 1  # the stale call was not sent
    assert (rollout.result.policy_version_min, rollout.result.policy_version_max) == (1, 3)


@pytest.mark.parametrize(
    ("request_message", "field"),
    [
        (pb.SetPolicyVersionRequest(version=1), "selector"),
        (pb.SetPolicyVersionRequest(selector=by_labels({"a": "b"})), "version"),
        (
            pb.SetPolicyVersionRequest(
                selector=pb.ModelCallSelector(endpoint=pb.EndpointSelector(base_url="ftp://x")),
                version=1,
            ),
            "selector.endpoint.base_url",
        ),
        (
            pb.PauseModelCallsRequest(
                selector=pb.ModelCallSelector(endpoint=pb.EndpointSelector(model="m"))
            ),
            "selector.endpoint.base_url",
        ),
        (
            pb.ResumeModelCallsRequest(selector=pb.ModelCallSelector(labels=pb.LabelSelector())),
            "selector.labels.labels",
        ),
    ],
)
async def test_a_bad_selector_or_version_is_invalid_argument_naming_the_field(
    stub: pb_grpc.RolloutServiceAsyncStub, request_message: object, field: str
) -> None:
    call = {
        pb.SetPolicyVersionRequest: stub.SetPolicyVersion,
        pb.PauseModelCallsRequest: stub.PauseModelCalls,
        pb.ResumeModelCallsRequest: stub.ResumeModelCalls,
    }[type(request_message)]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call(request_message)  # type: ignore[operator]
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violated_fields(refused.value) == [field]


TOKENS = json.dumps([f"{TENANT_A_TOKEN} tenant-a", f"{TENANT_B_TOKEN} tenant-b", ADMIN_TOKEN])


def serving(state: Path, env: dict[str, str]) -> Iterator[ServerProcess]:
    """A server of the module's own with `env`, stopped cleanly after its tests."""
    server = ServerProcess(state, env=env)
    with running(server):
        yield server


@pytest.fixture(scope="module")
def tenants_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("tenants"), {"ROLLOUT_AUTH_TOKENS": TOKENS})


async def test_a_tenant_versions_and_pauses_only_its_own_rollouts(
    tenants_server: ServerProcess, upstream: FakeUpstream
) -> None:
    a, b, admin = bearer(TENANT_A_TOKEN), bearer(TENANT_B_TOKEN), bearer(ADMIN_TOKEN)
    selector = by_endpoint(upstream)
    upstream.script(Reply(text="held", hold=True))
    async with grpc.aio.insecure_channel(tenants_server.target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        started = await stub.StartRollout(
            pb.StartRolloutRequest(spec=spec(upstream, 1)), metadata=a
        )
        await upstream.wait_for_requests(1)  # tenant a's rollout has a call in flight

        async def versioned(metadata: tuple[tuple[str, str], ...], version: int) -> int:
            request = pb.SetPolicyVersionRequest(selector=selector, version=version)
            return (await stub.SetPolicyVersion(request, metadata=metadata)).rollouts

        assert await versioned(b, 5) == 0
        assert await versioned(a, 1) == 1
        assert await versioned(admin, 2) == 1
        paused = await stub.PauseModelCalls(
            pb.PauseModelCallsRequest(selector=selector, abort_in_flight=True), metadata=b
        )
        assert paused.rollouts == 0
        upstream.release()
        async for response in stub.WatchRollout(
            pb.WatchRolloutRequest(rollout_id=started.rollout.id), metadata=a
        ):
            if response.event.HasField("finished"):
                rollout = response.event.finished
                break
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    # Its call started before any version and ended at the admin's 2; tenant b's 5 never landed.
    assert (rollout.result.policy_version_min, rollout.result.policy_version_max) == (2, 2)


async def test_the_python_clients_pause_version_and_resume(server_target: str) -> None:
    labels = {"sync": uuid.uuid4().hex}
    async with AsyncRolloutClient(server_target) as client:
        assert await client.set_policy_version(3, labels=labels) == 0
        paused = await client.pause_model_calls(labels=labels, abort_in_flight=True)
        assert (paused.rollouts, paused.calls_aborted) == (0, 0)
        resumed = await client.resume_model_calls(labels=labels)
        assert resumed.calls_released == 0
        with pytest.raises(InvalidArgumentError) as refused:
            await client.set_policy_version(0, labels=labels)
        assert [v.field for v in refused.value.field_violations] == ["version"]
    with RolloutClient(server_target) as sync:
        assert sync.set_policy_version(4, labels=labels) == 0
        assert sync.pause_model_calls(labels=labels).rollouts == 0
        assert sync.resume_model_calls(labels=labels).rollouts == 0
        with pytest.raises(InvalidArgumentError) as refused:
            sync.pause_model_calls(base_url="not a url")
        assert [v.field for v in refused.value.field_violations] == ["selector.endpoint.base_url"]


RULES_PER_TENANT = 3


@pytest.fixture(scope="module")
def bounded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Tenants a and b and an admin, a few rules each, and paused time charged past 1 s."""
    env = {
        "ROLLOUT_AUTH_TOKENS": TOKENS,
        "ROLLOUT_MODEL_CALL_RULES_PER_TENANT": str(RULES_PER_TENANT),
        "ROLLOUT_PAUSE_CREDIT_MAX_S": "1",
    }
    yield from serving(tmp_path_factory.mktemp("bounded"), env)


async def test_a_tenant_filling_its_rules_stops_only_itself_and_resume_frees_them(
    bounded_server: ServerProcess,
) -> None:
    a, b = bearer(TENANT_A_TOKEN), bearer(TENANT_B_TOKEN)
    runs = [by_labels({"run": uuid.uuid4().hex}) for _ in range(RULES_PER_TENANT + 1)]
    async with grpc.aio.insecure_channel(bounded_server.target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)

        async def pause(selector: pb.ModelCallSelector, metadata: Any) -> None:
            await stub.PauseModelCalls(
                pb.PauseModelCallsRequest(selector=selector), metadata=metadata
            )

        for selector in runs[:-1]:
            await pause(selector, a)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pause(runs[-1], a)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"'tenant-a' has {RULES_PER_TENANT} " in (refused.value.details() or "")
        assert "ROLLOUT_MODEL_CALL_RULES_PER_TENANT" in (refused.value.details() or "")
        # Nor may a set a version: its rules are pauses, all in force.
        for selector in runs:
            request = pb.SetPolicyVersionRequest(selector=selector, version=1)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.SetPolicyVersion(request, metadata=a)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

        # Tenant b is untouched by a's full table.
        for selector in runs:
            await pause(selector, b)
            await stub.ResumeModelCalls(pb.ResumeModelCallsRequest(selector=selector), metadata=b)
        for version, selector in enumerate(runs, start=1):
            request = pb.SetPolicyVersionRequest(selector=selector, version=version)
            await stub.SetPolicyVersion(request, metadata=b)

        # A resume frees its rule: a's next pause fits again, and only one.
        await stub.ResumeModelCalls(pb.ResumeModelCallsRequest(selector=runs[0]), metadata=a)
        await pause(runs[-1], a)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pause(runs[0], a)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        for selector in runs[1:]:
            await stub.ResumeModelCalls(pb.ResumeModelCallsRequest(selector=selector), metadata=a)


async def test_paused_time_beyond_the_credit_counts_against_the_agent_timeout(
    bounded_server: ServerProcess, upstream: FakeUpstream
) -> None:
    admin = bearer(ADMIN_TOKEN)
    labels = {"sync": uuid.uuid4().hex}
    selector = by_labels(labels)
    async with grpc.aio.insecure_channel(bounded_server.target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        await stub.PauseModelCalls(pb.PauseModelCallsRequest(selector=selector), metadata=admin)
        try:
            message = spec(upstream, 1, labels=labels, agentTimeout="2s")
            started = await stub.StartRollout(pb.StartRolloutRequest(spec=message), metadata=admin)
            async for response in stub.WatchRollout(
                pb.WatchRolloutRequest(rollout_id=started.rollout.id), metadata=admin
            ):
                if response.event.HasField("finished"):
                    rollout = response.event.finished
                    break
        finally:
            request = pb.ResumeModelCallsRequest(selector=selector)
            await stub.ResumeModelCalls(request, metadata=admin)
    # Held from its first call: 2 s of the agent's own and 1 s paused off its clock, then killed.
    assert rollout.status == pb.ROLLOUT_STATUS_TIMED_OUT
    assert rollout.result.error.kind == pb.ERROR_KIND_AGENT_TIMEOUT
    assert "ROLLOUT_PAUSE_CREDIT_MAX_S" in rollout.result.error.message
    assert rollout.result.timings.paused.ToTimedelta().total_seconds() > 1
    assert not upstream.requests


@pytest.fixture(scope="module")
def short_pause_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("short"), {"ROLLOUT_PAUSE_MAX_S": "2"})


async def test_a_pause_past_its_maximum_duration_lifts_itself(
    short_pause_server: ServerProcess, upstream: FakeUpstream
) -> None:
    selector = by_endpoint(upstream)
    upstream.script(Reply(text="from the old weights", hold=True), Reply(text="after the pause"))
    async with grpc.aio.insecure_channel(short_pause_server.target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        rollout_id = await start(stub, spec(upstream, 1))
        await upstream.wait_for_requests(1)
        request = pb.PauseModelCallsRequest(selector=selector, abort_in_flight=True)
        drained = await stub.PauseModelCalls(request)
        assert drained.calls_aborted == 1  # the call waits at the gate: no resume ever comes
        rollout = await finished(stub, rollout_id)
        events = [
            r.event async for r in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id=rollout_id))
        ]
        resumed = await stub.ResumeModelCalls(pb.ResumeModelCallsRequest(selector=selector))
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert [t.completion_text for t in rollout.result.turns] == ["after the pause"]
    notices = [
        e.notice
        for e in events
        if e.HasField("notice") and e.notice.topic.startswith("model_calls.")
    ]
    assert [n.topic for n in notices] == ["model_calls.paused", "model_calls.resumed"]
    assert "pause expired after 2s" in notices[1].message
    assert resumed.rollouts == 0  # nothing left to lift


async def test_a_groups_statistics_carry_its_members_policy_versions(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    # GroupStats.policy_version_min/max were never set, though the proto says they are.
    selector = by_endpoint(upstream)
    await stub.SetPolicyVersion(pb.SetPolicyVersionRequest(selector=selector, version=4))
    member = spec(upstream, 1)
    ran = await stub.RunGroup(pb.RunGroupRequest(spec=pb.GroupSpec(spec=member, n=2)))
    group = ran.group
    assert group.status == pb.GROUP_STATUS_COMPLETED, group
    assert [m.counted for m in group.members] == [True, True]
    assert group.stats.HasField("policy_version_min"), group.stats
    assert (group.stats.policy_version_min, group.stats.policy_version_max) == (4, 4)
    got = (await stub.GetGroup(pb.GetGroupRequest(group_id=group.id))).group
    assert (got.stats.policy_version_min, got.stats.policy_version_max) == (4, 4)
