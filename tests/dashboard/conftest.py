"""What the dashboard's browser tests share: a gRPC stub on the module's `dashboard_server`
and the scripted upstream its rollouts call."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream
from testing.server_process import ServerProcess

MODEL = "fake-policy-8b"
KEY = "sk-dashboard-test"


@pytest.fixture
async def stub(dashboard_server: ServerProcess) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    async with grpc.aio.insecure_channel(dashboard_server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=KEY, model=MODEL) as upstream:
        yield upstream
