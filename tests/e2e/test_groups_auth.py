"""Groups under bearer-token authentication: a group and its members are its tenant's, and
ListGroups lists a tenant's own only (newest first, in pages, by label and status; a bad filter
or page token is INVALID_ARGUMENT naming the field)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess, running
from testing.specs import command_spec
from tests.e2e.auth_support import (
    ADMIN_TOKEN,
    TENANT_A_TOKEN,
    TENANT_B_TOKEN,
    bearer,
    write_token_file,
)
from tests.e2e.bad_request import violated_fields
from tests.e2e.group_support import group_spec

pytestmark = pytest.mark.e2e

A, B, ADMIN = bearer(TENANT_A_TOKEN), bearer(TENANT_B_TOKEN), bearer(ADMIN_TOKEN)


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("group-auth")
    server = ServerProcess(
        folder / "state",
        env={
            "ROLLOUT_AUTH_TOKEN_FILE": str(write_token_file(folder / "tokens")),
            "ROLLOUT_AUTH_TOKENS": json.dumps([f"{TENANT_B_TOKEN} tenant-b"]),
        },
    )
    with running(server):
        yield server


@pytest.fixture
async def stub(auth_server: ServerProcess) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    async with grpc.aio.insecure_channel(auth_server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


async def _refusal(call: Any) -> grpc.aio.AioRpcError:
    try:
        if isinstance(call, grpc.aio.UnaryStreamCall):
            async for _ in call:
                pass
        else:
            await call
    except grpc.aio.AioRpcError as error:
        return error
    raise AssertionError("the call succeeded")


async def test_another_tenant_cannot_see_cancel_or_watch_a_group(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = group_spec(command_spec("sleep 600"), 2)
    started = (await stub.StartGroup(pb.StartGroupRequest(spec=spec), metadata=A)).group
    try:
        unknown = await _refusal(stub.GetGroup(pb.GetGroupRequest(group_id="0" * 32), metadata=B))
        refused = [
            await _refusal(stub.GetGroup(pb.GetGroupRequest(group_id=started.id), metadata=B)),
            await _refusal(
                stub.CancelGroup(pb.CancelGroupRequest(group_id=started.id), metadata=B)
            ),
            await _refusal(stub.WatchGroup(pb.WatchGroupRequest(group_id=started.id), metadata=B)),
        ]
        seen_by_admin = await stub.GetGroup(pb.GetGroupRequest(group_id=started.id), metadata=ADMIN)
    finally:
        cancelled = await stub.CancelGroup(pb.CancelGroupRequest(group_id=started.id), metadata=A)
    for error in refused:
        assert error.code() == grpc.StatusCode.NOT_FOUND
        assert error.details() == (unknown.details() or "").replace("0" * 32, started.id)
    assert (started.tenant, seen_by_admin.group.tenant) == ("tenant-a", "tenant-a")
    assert cancelled.group.status == pb.GROUP_STATUS_CANCELLED
    member = await stub.GetRollout(
        pb.GetRolloutRequest(rollout_id=cancelled.group.members[0].rollout_id), metadata=A
    )
    assert member.rollout.tenant == "tenant-a"


async def test_a_group_call_without_a_token_is_unauthenticated(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = group_spec(command_spec("true"), 2)
    error = await _refusal(stub.StartGroup(pb.StartGroupRequest(spec=spec)))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


async def _run(
    stub: pb_grpc.RolloutServiceAsyncStub,
    labels: dict[str, str],
    metadata: tuple[tuple[str, str], ...],
) -> pb.Group:
    spec = group_spec(command_spec("true", labels=labels), 1)
    return (await stub.RunGroup(pb.RunGroupRequest(spec=spec), metadata=metadata)).group


async def _list_ids(
    stub: pb_grpc.RolloutServiceAsyncStub,
    metadata: tuple[tuple[str, str], ...],
    page_size: int = 0,
    **filters: object,
) -> list[list[str]]:
    """Every page's group ids, in order."""
    pages: list[list[str]] = []
    token = ""
    while True:
        request = pb.ListGroupsRequest(page_size=page_size, page_token=token, **filters)  # type: ignore[arg-type]
        response = await stub.ListGroups(request, metadata=metadata)
        pages.append([group.id for group in response.groups])
        token = response.next_page_token
        if not token:
            return pages


async def test_a_tenant_lists_its_own_groups_by_label_and_status_in_pages(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    suite = {"suite": uuid.uuid4().hex}
    first = await _run(stub, {**suite, "rollout.batch": "one"}, A)
    second = await _run(stub, suite, A)
    third = await _run(stub, {**suite, "rollout.batch": "one"}, A)
    theirs = await _run(stub, suite, B)
    running_spec = group_spec(command_spec("sleep 600", labels=suite), 1)
    running = (await stub.StartGroup(pb.StartGroupRequest(spec=running_spec), metadata=A)).group
    try:
        mine = [running.id, third.id, second.id, first.id]
        assert await _list_ids(stub, A, labels=suite) == [mine]
        assert await _list_ids(stub, A, 3, labels=suite) == [mine[:3], mine[3:]]
        assert await _list_ids(stub, A, 2, labels=suite) == [mine[:2], mine[2:]]
        batch = {**suite, "rollout.batch": "one"}
        assert await _list_ids(stub, A, labels=batch) == [[third.id, first.id]]
        completed = [pb.GROUP_STATUS_COMPLETED]
        assert await _list_ids(stub, A, labels=suite, statuses=completed) == [mine[1:]]
        live = [pb.GROUP_STATUS_RUNNING]
        assert await _list_ids(stub, A, labels=suite, statuses=live) == [[running.id]]
        assert await _list_ids(stub, B, labels=suite) == [[theirs.id]]
        assert await _list_ids(stub, ADMIN, labels=suite) == [[running.id, theirs.id, *mine[1:]]]
        listed = (await stub.ListGroups(pb.ListGroupsRequest(labels=batch), metadata=A)).groups
        assert listed[0] == third
        assert listed[0].stats.counted == 1
    finally:
        cancel = pb.CancelGroupRequest(group_id=running.id)
        await stub.CancelGroup(cancel, metadata=A)
    cancelled = [pb.GROUP_STATUS_CANCELLED]
    assert await _list_ids(stub, A, labels=suite, statuses=cancelled) == [[running.id]]


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"page_token": "not-a-token"}, "page_token"),
        ({"statuses": [pb.GROUP_STATUS_UNSPECIFIED]}, "statuses[0]"),
        ({"statuses": [pb.GROUP_STATUS_RUNNING, 99]}, "statuses[1]"),
        ({"labels": {"": "x"}}, "labels['']"),
    ],
)
async def test_a_bad_list_request_names_its_field(
    stub: pb_grpc.RolloutServiceAsyncStub, request_fields: dict[str, object], field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.ListGroups(pb.ListGroupsRequest(**request_fields), metadata=A)  # type: ignore[arg-type]
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violated_fields(raised.value) == [field]


async def test_listing_groups_needs_a_token(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.ListGroups(pb.ListGroupsRequest())
    assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
