"""Through the real server: a rollout is classified by the model calls that matter (issue 13).

The command agent makes opencode's pattern of calls: an untrainable title call (the small
model alias) and trainable main calls, each failing or not as the fake upstream is told.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.proxy import AUX_MODEL_ALIAS
from testing.fakes.llm_upstream import FakeUpstream, Reply

pytestmark = pytest.mark.e2e

KEY = "sk-classify-9f1e"

# Calls the model once per argument: "title" with the small alias, anything else as main.
CALLS = """python3 - {models} <<'PY'
import json, os, sys, urllib.request
for name in sys.argv[1:]:
    model = "{aux}" if name == "title" else os.environ["OPENAI_MODEL"]
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps({{"model": model,
                          "messages": [{{"role": "user", "content": name}}]}}).encode(),
        headers={{"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"}})
    try:
        urllib.request.urlopen(request, timeout=30).read()
    except Exception as exc:
        print("call failed:", exc)
PY"""


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=KEY) as upstream:
        yield upstream


async def run(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream, *calls: str
) -> pb.Rollout:
    spec = pb.RolloutSpec(
        task=pb.Task(instruction="call the model", verify=["true"]),
        agent=pb.Agent(
            name="command", command=CALLS.format(models=" ".join(calls), aux=AUX_MODEL_ALIAS)
        ),
        endpoint=pb.Endpoint(base_url=upstream.base_url, api_key=KEY, model="m"),
    )
    return (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout


def is_title(body: object) -> bool:
    return isinstance(body, dict) and body["messages"][0]["content"] == "title"


async def test_main_calls_all_failing_is_upstream_llm_though_the_title_succeeded(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(status=400, error_message="context exceeded"), Reply(status=400))
    upstream.script(Reply(text="A title"), match=is_title)
    rollout = await run(stub, upstream, "title", "main", "main")
    assert [t.trainable for t in rollout.result.turns] == [False, True, True]
    assert [t.upstream_status for t in rollout.result.turns] == [200, 400, 400]
    assert rollout.status == pb.ROLLOUT_STATUS_FAILED
    assert rollout.result.error.kind == pb.ERROR_KIND_UPSTREAM_LLM
    assert rollout.result.trainable_calls == 2
    assert rollout.result.trainable_calls_failed == 2


async def test_some_main_calls_failing_is_scored_and_counted(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(status=500), Reply(text="fine"))
    upstream.script(Reply(status=500), match=is_title)
    rollout = await run(stub, upstream, "title", "main", "main")
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.reward == 1.0
    assert rollout.result.trainable_calls == 2
    assert rollout.result.trainable_calls_failed == 1
