"""A key from the server's environment goes only to the base URL configured beside it.

The red team set `endpoint.kind: vllm` with a base_url of their own: the server's
VLLM_API_KEY was sent there, and with BLACK_BOX capture it was put in the sandbox's
environment and came back in agent_log_tail and the store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream
from testing.server_process import ServerProcess, running
from testing.specs import command_spec
from tests.e2e.bad_request import violated_fields

pytestmark = pytest.mark.e2e

SERVER_KEY = "server-held-vllm-key-5e0b"
SERVER_ENV = {
    "VLLM_BASE_URL": "http://127.0.0.1:9/v1",
    "VLLM_API_KEY": SERVER_KEY,
    "VLLM_MODEL": "server-model",
}

CALL_MODEL = """python3 - <<'PY'
import json, os, urllib.request
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
print(urllib.request.urlopen(request, timeout=30).status)
PY"""


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server holding a vLLM key in its environment."""
    server = ServerProcess(tmp_path_factory.mktemp("keyed-state"), env=SERVER_ENV)
    with running(server):
        yield server


@pytest.fixture
async def keyed_stub(keyed_server: ServerProcess) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    async with grpc.aio.insecure_channel(keyed_server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as upstream:
        yield upstream


async def test_the_server_key_is_not_sent_to_a_caller_chosen_url(
    keyed_stub: pb_grpc.RolloutServiceAsyncStub,
    keyed_server: ServerProcess,
    upstream: FakeUpstream,
) -> None:
    spec = command_spec(CALL_MODEL, endpoint={"kind": "vllm", "baseUrl": upstream.base_url})
    response = await keyed_stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    assert response.rollout.result.turn_count == 1, response.rollout.result
    assert upstream.requests, "the call did not reach the caller's endpoint"
    for request in upstream.requests:
        assert SERVER_KEY not in repr(request.headers)
    assert SERVER_KEY not in keyed_server.text()


async def test_black_box_never_hands_the_server_key_to_the_sandbox(
    keyed_stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = command_spec(
        'echo "key=$OPENAI_API_KEY"',
        endpoint={"kind": "vllm"},
        capture={"mode": "CAPTURE_MODE_BLACK_BOX"},
        sandbox={"network": "NETWORK_POLICY_FULL"},
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await keyed_stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violated_fields(caught.value) == ["spec.endpoint.api_key"]


async def test_black_box_to_a_caller_url_runs_without_the_server_key(
    keyed_stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    spec = command_spec(
        'echo "key=$OPENAI_API_KEY"',
        endpoint={"kind": "vllm", "baseUrl": upstream.base_url},
        capture={"mode": "CAPTURE_MODE_BLACK_BOX"},
        sandbox={"network": "NETWORK_POLICY_FULL"},
    )
    response = await keyed_stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    assert response.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, response.rollout.result
    assert "key=\n" in response.rollout.result.agent_log_tail
    stored = await keyed_stub.GetRollout(pb.GetRolloutRequest(rollout_id=response.rollout.id))
    assert SERVER_KEY.encode() not in stored.SerializeToString()
