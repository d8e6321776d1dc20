"""request_id over gRPC: the same spec finds its rollout, another spec is ALREADY_EXISTS."""

from __future__ import annotations

import uuid

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess
from testing.specs import command_spec
from tests.e2e.bad_request import violated_fields

pytestmark = pytest.mark.e2e


async def refused(
    stub: pb_grpc.RolloutServiceAsyncStub, spec: pb.RolloutSpec
) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.StartRollout(pb.StartRolloutRequest(spec=spec))
    return caught.value


async def test_a_request_id_reused_with_another_spec_is_already_exists(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    request_id = f"req-{uuid.uuid4()}"
    first = await stub.RunRollout(
        pb.RunRolloutRequest(spec=command_spec("echo one", request_id=request_id))
    )

    error = await refused(stub, command_spec("echo two", request_id=request_id))

    assert error.code() == grpc.StatusCode.ALREADY_EXISTS
    assert violated_fields(error) == ["spec.request_id"]
    message = error.details() or ""
    assert first.rollout.id in message
    assert len(message) < 200
    again = await stub.StartRollout(
        pb.StartRolloutRequest(spec=command_spec("echo one", request_id=request_id))
    )
    assert again.rollout.id == first.rollout.id


async def test_the_same_spec_keeps_its_rollout_across_a_restart(
    fresh_server: ServerProcess,
) -> None:
    spec = command_spec("true", request_id=f"req-{uuid.uuid4()}", labels={"a": "1", "b": "2"})
    spec.task.files["data.bin"] = bytes(range(256))
    async with grpc.aio.insecure_channel(fresh_server.start()) as channel:
        first = await pb_grpc.RolloutServiceStub(channel).RunRollout(
            pb.RunRolloutRequest(spec=spec)
        )
    fresh_server.stop()

    async with grpc.aio.insecure_channel(fresh_server.start()) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        again = await stub.StartRollout(pb.StartRolloutRequest(spec=spec))
        spec.task.files["data.bin"] = b"changed"
        error = await refused(stub, spec)

    assert again.rollout.id == first.rollout.id
    assert again.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS
