"""Through the real server: an agent that sets its own sampling in chat completions and in
Anthropic Messages reaches the trainer's upstream with the spec's sampling and none of its
own, and each turn of the result says what was sent and what was stripped."""

from __future__ import annotations

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream
from testing.specs import command_spec

pytestmark = pytest.mark.e2e

# A scripted policy choosing its own distribution on each call.
HOSTILE_CALLS = """python3 - <<'PY'
import json, os, urllib.request
def call(path, body):
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + path,
        data=json.dumps({"model": os.environ["OPENAI_MODEL"], **body}).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=60).read()
call("/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
     "temperature": 0.0, "seed": 1, "n": 8, "logit_bias": {"7": 100},
     "guided_choice": ["PASS"], "extra_body": {"top_k": 1}})
call("/messages", {"max_tokens": 50, "messages": [{"role": "user", "content": "hi"}],
     "temperature": 0.0, "top_k": 1, "stop_sequences": ["x"]})
open("done", "w").write("ok")
PY"""
CHAT_STRIPPED = ["temperature", "seed", "n", "logit_bias", "guided_choice", "extra_body"]
MESSAGES_STRIPPED = ["temperature", "top_k", "stop_sequences"]


async def test_the_agents_sampling_is_stripped_and_each_turn_records_what_was_sent(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    async with FakeUpstream() as upstream:
        spec = command_spec(
            HOSTILE_CALLS,
            verify=("test -f done",),
            endpoint={"base_url": upstream.base_url, "model": "fake-model"},
            sampling={"seed": "11", "temperature": 0.7, "topK": 20},
        )
        rollout = (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout
        received = [request.body for request in upstream.requests if request.body]
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert len(received) == 2
    for body in received:
        assert (body["seed"], body["temperature"], body["top_k"]) == (11, 0.7, 20)
        assert not {"n", "logit_bias", "guided_choice", "extra_body", "stop"} & set(body)
    turns = sorted(rollout.result.turns, key=lambda turn: turn.index)
    assert [turn.dialect for turn in turns] == [pb.DIALECT_CHAT_COMPLETIONS, pb.DIALECT_MESSAGES]
    assert [list(turn.sampling_stripped) for turn in turns] == [CHAT_STRIPPED, MESSAGES_STRIPPED]
    for turn in turns:
        assert (turn.sampling.seed, turn.sampling.temperature, turn.sampling.top_k) == (11, 0.7, 20)
        assert not turn.sampling.HasField("top_p")  # not fixed, so not sent
