"""ListRollouts over gRPC with specs near the size limit: pages fit, advance, and slim is slim.

The server's limits are lowered (4 MiB specs, 5 MiB messages) so that four rollouts whose
specs are close to the spec limit would, carried whole, make a page three times too large.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess
from testing.specs import command_spec

pytestmark = pytest.mark.e2e

_MIB = 1024 * 1024
_SPEC_LIMIT = 4 * _MIB
_MESSAGE_LIMIT = 5 * _MIB
_ROLLOUTS = 4


@pytest.fixture
async def stub(fresh_server: ServerProcess) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    fresh_server.env |= {
        "ROLLOUT_MAX_SPEC_BYTES": str(_SPEC_LIMIT),
        "ROLLOUT_MAX_MESSAGE_BYTES": str(_MESSAGE_LIMIT),
    }
    target = fresh_server.start()
    # The client accepts more than the server may send, so an oversized page would arrive.
    options = [("grpc.max_receive_message_length", 8 * _MESSAGE_LIMIT)]
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


async def near_limit_rollouts(
    stub: pb_grpc.RolloutServiceAsyncStub, labels: dict[str, str]
) -> dict[str, bytes]:
    """Runs rollouts whose task files nearly fill the spec limit; their id -> file."""
    sent = {}
    for _ in range(_ROLLOUTS):
        spec = command_spec("true", labels=labels)
        blob = os.urandom(_SPEC_LIMIT - 64 * 1024)
        spec.task.files["blob.bin"] = blob
        spec.task.verifier_files["check.sh"] = b"true\n"
        done = await stub.RunRollout(pb.RunRolloutRequest(spec=spec, view=pb.RESULT_VIEW_SLIM))
        assert done.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED
        sent[done.rollout.id] = blob
    return sent


async def walk(
    stub: pb_grpc.RolloutServiceAsyncStub, request: pb.ListRolloutsRequest
) -> list[pb.ListRolloutsResponse]:
    pages = []
    while True:
        page = await stub.ListRollouts(request)
        pages.append(page)
        if not page.next_page_token:
            return pages
        assert page.rollouts, "a page with a next token holds at least one rollout"
        request.page_token = page.next_page_token


async def test_pages_of_near_limit_specs_fit_and_advance_and_slim_is_slim(
    stub: pb_grpc.RolloutServiceAsyncStub, record_property: Callable[[str, object], None]
) -> None:
    labels = {"batch": uuid.uuid4().hex}
    sent = await near_limit_rollouts(stub, labels)

    (slim,) = await walk(stub, pb.ListRolloutsRequest(labels=labels))
    assert sorted(r.id for r in slim.rollouts) == sorted(sent)
    for rollout in slim.rollouts:
        assert not rollout.spec.task.files
        assert not rollout.spec.task.verifier_files
        assert rollout.spec.task.instruction == "do the task"
    assert slim.ByteSize() < 64 * 1024

    full = await walk(stub, pb.ListRolloutsRequest(labels=labels, view=pb.RESULT_VIEW_FULL))
    assert [len(page.rollouts) for page in full] == [1] * _ROLLOUTS
    assert all(page.ByteSize() <= _MESSAGE_LIMIT for page in full)
    record_property("slim_page_bytes", slim.ByteSize())
    record_property("full_page_bytes", [page.ByteSize() for page in full])
    listed = {r.id: r.spec.task.files["blob.bin"] for page in full for r in page.rollouts}
    assert listed == sent

    tiny = await walk(stub, pb.ListRolloutsRequest(labels=labels, max_page_bytes=1))
    assert [len(page.rollouts) for page in tiny] == [1] * _ROLLOUTS
    assert [r.id for page in tiny for r in page.rollouts] == [r.id for r in slim.rollouts]
