"""Through the real server: network FULL is the internet, never the service itself."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream
from testing.server_process import ServerProcess

pytestmark = pytest.mark.e2e

_KEY = "sk-e2e-full-network"
_MODEL = "fake-policy-8b"
# One model call through the capture proxy, then a try at the service's own gRPC port;
# the sleep keeps both rollouts' forwarders (127.0.0.1:48080 in each sandbox) alive at once.
_AGENT = """python3 - <<'PY'
import json, os, socket, time, urllib.request
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": os.environ["OPENAI_MODEL"],
                     "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
urllib.request.urlopen(request, timeout=30).read()
try:
    socket.create_connection(("127.0.0.1", GRPC_PORT), timeout=5)
    open("grpc.txt", "w").write("reached")
except OSError as exc:
    open("grpc.txt", "w").write(f"blocked: {exc}")
time.sleep(3)
PY"""


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=_KEY, model=_MODEL) as upstream:
        yield upstream


async def test_two_full_rollouts_with_capture_run_at_once_and_miss_the_grpc_port(
    stub: pb_grpc.RolloutServiceAsyncStub, server_process: ServerProcess, upstream: FakeUpstream
) -> None:
    port = server_process.target.rsplit(":", 1)[1]
    spec = pb.RolloutSpec(
        task=pb.Task(instruction="call the model"),
        agent=pb.Agent(name="command", command=_AGENT.replace("GRPC_PORT", port)),
        endpoint=pb.Endpoint(base_url=upstream.base_url, api_key=_KEY, model=_MODEL),
        sandbox=pb.SandboxSpec(network=pb.NETWORK_POLICY_FULL),
    )
    responses = await asyncio.gather(
        *(stub.RunRollout(pb.RunRolloutRequest(spec=spec)) for _ in range(2))
    )
    for response in responses:
        rollout = response.rollout
        assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
        assert len(rollout.result.turns) == 1, rollout.result.agent_log_tail
        assert rollout.result.files["grpc.txt"].startswith(b"blocked"), rollout.result.files
