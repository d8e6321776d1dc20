"""Token ids and logprobs are captured exactly as the upstream sent them, in every shape."""

from __future__ import annotations

import json

import httpx
import pytest

from service.models import CaptureSpec, Turn
from service.proxy.capture.assembly import CompletionAssembler
from testing.fakes.llm_upstream import FakeUpstream, Reply, TokenShape, ToolCallReply
from tests.proxy.conftest import OpenRollout, chat, stream_events

REPLY = Reply(
    text="I will write the file now.",
    reasoning="The user wants a file.",
    tool_calls=[ToolCallReply("write", '{"path": "a.txt", "content": "hello"}')],
)


async def one_turn(
    open_rollout: OpenRollout,
    agent: httpx.AsyncClient,
    *,
    stream: bool,
    capture: CaptureSpec | None = None,
) -> Turn:
    rollout = open_rollout(capture=capture)
    body = chat("write a.txt", stream=stream)
    if stream:
        events = await stream_events(agent, rollout, body)
        assert events[-1] == "[DONE]"
    else:
        response = await agent.post(rollout.chat_url, json=body, headers=rollout.headers)
        assert response.status_code == 200
    [turn] = rollout.route.turns
    assert rollout.published == [turn]
    return turn


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize(
    "shape", [TokenShape.VLLM, TokenShape.LOGPROB_TOKEN_ID, TokenShape.TOKEN_ID_STRINGS]
)
async def test_ids_and_logprobs_match_what_the_upstream_sent(
    open_rollout: OpenRollout,
    agent: httpx.AsyncClient,
    upstream: FakeUpstream,
    shape: TokenShape,
    stream: bool,
) -> None:
    upstream.script(Reply(**{**vars(REPLY), "shape": shape}))
    turn = await one_turn(open_rollout, agent, stream=stream)
    [sent] = upstream.sent
    assert sent.ids_sent
    assert turn.token_ids_present
    assert turn.completion_token_ids == sent.completion_token_ids
    assert turn.prompt_token_ids == sent.prompt_token_ids
    assert turn.logprobs == sent.logprobs
    assert len(turn.logprobs) == len(sent.tokens) > 5
    assert turn.completion_text == REPLY.text
    assert turn.reasoning_text == REPLY.reasoning
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [
        (c.name, c.arguments) for c in REPLY.tool_calls
    ]
    assert turn.finish_reason == "tool_calls"
    assert turn.usage.completion_tokens == len(sent.tokens)


async def test_vllm_prompt_ids_are_recorded(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    turn = await one_turn(open_rollout, agent, stream=False)
    assert turn.prompt_token_ids == upstream.sent[0].prompt_token_ids != []


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("asked", [False, True], ids=["proxy-asked", "agent-asked"])
async def test_the_prompt_ids_reach_the_agent_only_when_it_asked_for_them(
    open_rollout: OpenRollout,
    agent: httpx.AsyncClient,
    upstream: FakeUpstream,
    stream: bool,
    asked: bool,
) -> None:
    """The proxy asks for ids for the turn; tens of thousands of prompt ids are not the
    agent's to read (nor to write on to it) unless it asked for them itself."""
    rollout = open_rollout()
    body = chat("write a.txt", stream=stream, **({"return_token_ids": True} if asked else {}))
    if stream:
        events = await stream_events(agent, rollout, body)
        docs = [json.loads(event) for event in events[:-1]]
    else:
        response = await agent.post(rollout.chat_url, json=body, headers=rollout.headers)
        docs = [response.json()]
    [sent] = upstream.sent
    given = [doc["prompt_token_ids"] for doc in docs if "prompt_token_ids" in doc]

    assert given == ([sent.prompt_token_ids] if asked else [None])
    assert rollout.route.turns[0].prompt_token_ids == sent.prompt_token_ids != []
    assert any(choice.get("token_ids") for doc in docs for choice in doc["choices"])


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_no_ids_are_invented(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(Reply(text="plain answer here", shape=TokenShape.NONE))
    turn = await one_turn(open_rollout, agent, stream=stream)
    assert not turn.token_ids_present
    assert turn.completion_token_ids == []
    assert turn.prompt_token_ids == []
    assert turn.logprobs == upstream.sent[0].logprobs
    assert turn.completion_tokens == ["plain", " answer", " here"]


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_top_logprobs_are_kept_when_more_than_one_is_asked(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(Reply(text="a b c", shape=TokenShape.LOGPROB_TOKEN_ID))
    turn = await one_turn(open_rollout, agent, stream=stream, capture=CaptureSpec(top_logprobs=3))
    assert [len(alternatives) for alternatives in turn.top_logprobs] == [3, 3, 3]
    first = turn.top_logprobs[0][0]
    assert (first.token_id, first.logprob) == (turn.completion_token_ids[0], turn.logprobs[0])


async def test_top_logprobs_are_not_kept_for_k_of_one(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    turn = await one_turn(open_rollout, agent, stream=False)
    assert turn.top_logprobs == []


async def test_streamed_turn_has_time_to_first_token(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    turn = await one_turn(open_rollout, agent, stream=True)
    assert turn.stream
    assert turn.time_to_first_token_s is not None
    assert 0 < turn.time_to_first_token_s <= turn.latency_s
    assert turn.upstream_status == 200
    assert not turn.failed


def test_llama_cpp_ids_are_read_from_the_id_key() -> None:
    assembler = CompletionAssembler(top_k=1)
    entries = [{"id": 7, "token": "a", "logprob": -0.5}, {"id": 9, "token": "b", "logprob": -1.0}]
    assembler.add_completion(
        {"choices": [{"message": {"content": "ab"}, "logprobs": {"content": entries}}]}
    )
    fields = assembler.fields()
    assert fields["completion_token_ids"] == [7, 9]
    assert fields["token_ids_present"]


def test_partial_entry_ids_are_not_trusted() -> None:
    assembler = CompletionAssembler(top_k=1)
    entries = [{"token_id": 7, "token": "a", "logprob": -0.5}, {"token": "b", "logprob": -1.0}]
    assembler.add_completion(
        {"choices": [{"message": {"content": "ab"}, "logprobs": {"content": entries}}]}
    )
    assert assembler.fields()["completion_token_ids"] == []
    assert not assembler.fields()["token_ids_present"]
