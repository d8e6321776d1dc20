"""Through the real server: a wrong model endpoint ends the rollout at the first call.

An endpoint that cannot be reached (a closed port) or refuses the call (401: a wrong key;
404: a wrong URL) fails the rollout UPSTREAM_LLM with the upstream's answer as soon as the
agent's first call comes back, the agent stopped. The agent here retries for far longer
than the test may take, under a 300 s agent timeout: on main it waited that out (the
suite's 120 s per-test limit fails it), and the error named no status.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream
from testing.specs import command_spec

pytestmark = pytest.mark.e2e

UPSTREAM_KEY = "sk-fail-fast-upstream-51c8"
UPSTREAM_MODEL = "fake-policy-fail-fast"

# An agent that keeps retrying its model call, as real harnesses do on errors.
RETRYING_AGENT = """python3 - <<'PY'
import json, os, time, urllib.request
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": os.environ["OPENAI_MODEL"],
                     "messages": [{"role": "user", "content": "hello"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
for _ in range(300):
    try:
        urllib.request.urlopen(request, timeout=30).read()
        break
    except Exception:
        time.sleep(1)
PY
echo finished > finished.txt"""


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL) as upstream:
        yield upstream


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _run(stub: pb_grpc.RolloutServiceAsyncStub, endpoint: pb.Endpoint) -> pb.Rollout:
    spec = command_spec(RETRYING_AGENT, verify=("true",), agentTimeout="300s")
    spec.endpoint.CopyFrom(endpoint)
    return (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout


def _assert_stopped_for(rollout: pb.Rollout, answer: str) -> None:
    assert rollout.status == pb.ROLLOUT_STATUS_FAILED, rollout.result.error
    error = rollout.result.error
    assert error.kind == pb.ERROR_KIND_UPSTREAM_LLM
    assert "refused the agent's first call" in error.message
    assert answer in error.message
    assert UPSTREAM_KEY not in error.message
    assert "finished.txt" not in rollout.result.files  # stopped, neither finished nor scored
    assert not rollout.result.HasField("reward")
    [turn] = rollout.result.turns  # one call was enough to know
    assert answer in turn.upstream_error


async def test_a_closed_port_fails_upstream_llm_at_the_first_call(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    port = _closed_port()
    endpoint = pb.Endpoint(
        base_url=f"http://127.0.0.1:{port}/v1", api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL
    )
    rollout = await _run(stub, endpoint)
    _assert_stopped_for(rollout, f"cannot connect to 127.0.0.1:{port}")


async def test_a_wrong_key_fails_upstream_llm_with_the_401(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    endpoint = pb.Endpoint(base_url=upstream.base_url, api_key="sk-wrong", model=UPSTREAM_MODEL)
    rollout = await _run(stub, endpoint)
    _assert_stopped_for(rollout, "upstream HTTP 401: invalid api key")


async def test_a_wrong_url_fails_upstream_llm_with_the_404(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    endpoint = pb.Endpoint(
        base_url=f"{upstream.base_url}/missing", api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL
    )
    rollout = await _run(stub, endpoint)
    _assert_stopped_for(rollout, "upstream HTTP 404")
