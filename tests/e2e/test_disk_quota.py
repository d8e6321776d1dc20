"""Through the real server: the disk quota a spec asks for, within the server's maximum."""

from __future__ import annotations

import os

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.specs import command_spec
from tests.e2e.bad_request import violated_fields

pytestmark = pytest.mark.e2e


async def test_a_quota_above_the_servers_maximum_is_invalid(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = command_spec()
    spec.sandbox.resources.disk_mb = 10**6
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.StartRollout(pb.StartRolloutRequest(spec=spec))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violated_fields(caught.value) == ["spec.sandbox.resources.disk_mb"]


@pytest.mark.skipif(os.geteuid() != 0, reason="disk quotas need a root server")
async def test_a_rollout_gets_the_quota_it_asks_for(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    spec = command_spec("df --output=size -B1M ~ | tail -n 1 > size.txt")
    spec.sandbox.resources.disk_mb = 128
    response = await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    size = int(response.rollout.result.files["size.txt"])
    assert 100 <= size <= 128
