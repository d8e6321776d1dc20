"""A turn records what is new in its request, not the whole history every time."""

from __future__ import annotations

import random
import sys
from typing import Any

import httpx

from service.models import CaptureSpec
from service.proxy import AUX_MODEL_ALIAS, ResolvedEndpoint, Route
from service.proxy.capture.history import LANES_KEPT, LaneHistory
from service.proxy.capture.prompt_ids import PromptIdCache, cut_prompt_ids
from testing.fakes.llm_upstream import FakeUpstream
from tests.proxy.conftest import OpenRollout, Rollout, chat

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


async def post(agent: httpx.AsyncClient, rollout: Rollout, body: dict[str, Any]) -> None:
    response = await agent.post(rollout.chat_url, json=body, headers=rollout.headers)
    assert response.status_code == 200


async def test_each_turn_records_only_new_messages(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    rollout = open_rollout()
    await post(agent, rollout, chat("task", tools=TOOLS))
    await post(agent, rollout, chat("task", "reply 1", "tool output", tools=TOOLS))
    await post(
        agent, rollout, chat("task", "reply 1", "tool output", "reply 2", "more", tools=TOOLS)
    )
    first, second, third = rollout.route.turns
    assert (first.request_message_offset, len(first.request_messages)) == (0, 1)
    assert (second.request_message_offset, len(second.request_messages)) == (1, 2)
    assert (third.request_message_offset, [m["content"] for m in third.request_messages]) == (
        3,
        ["reply 2", "more"],
    )


async def test_tools_are_sent_once_then_by_hash(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    rollout = open_rollout()
    await post(agent, rollout, chat("a", tools=TOOLS))
    await post(agent, rollout, chat("a", "b", "c", tools=TOOLS))
    changed = [*TOOLS, {"type": "function", "function": {"name": "read"}}]
    await post(agent, rollout, chat("a", "b", "c", "d", "e", tools=changed))
    first, second, third = rollout.route.turns
    assert (first.tools, second.tools, third.tools) == (TOOLS, [], changed)
    assert first.tools_hash == second.tools_hash != third.tools_hash
    assert first.tools_hash


async def test_a_rewritten_history_records_from_where_it_differs(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    rollout = open_rollout()
    await post(agent, rollout, chat("task", "long reply", "tool output"))
    await post(agent, rollout, chat("task", "summary of the work so far"))
    second = rollout.route.turns[1]
    assert second.request_message_offset == 1
    assert [m["content"] for m in second.request_messages] == ["summary of the work so far"]


async def test_auxiliary_calls_are_a_separate_lane_and_not_trainable(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    rollout = open_rollout()
    await post(agent, rollout, chat("task", tools=TOOLS))
    await post(agent, rollout, chat("generate a title", model=AUX_MODEL_ALIAS))
    await post(agent, rollout, chat("task", "reply", "output", tools=TOOLS))
    main1, title, main2 = rollout.route.turns
    assert (main1.trainable, title.trainable, main2.trainable) == (True, False, True)
    assert title.request_message_offset == 0
    assert main2.request_message_offset == 1
    assert [t.index for t in rollout.route.turns] == [0, 1, 2]


def test_a_request_too_large_to_keep_is_forgotten_and_the_next_recorded_whole() -> None:
    """The agent picks the sizes: kept, each 60 MiB request stayed until the rollout ended."""
    history = LaneHistory()
    history.delta("m", [{"c": "a"}], TOOLS)
    big = [{"c": "a"}, {"c": "b" * 1000}]
    references = sys.getrefcount(big)
    delta = history.delta("m", big, TOOLS, keep=False)
    assert (delta.offset, delta.messages, delta.tools) == (1, big[1:], [])
    assert sys.getrefcount(big) == references  # not kept
    after = history.delta("m", [*big, {"c": "c"}], TOOLS)
    assert (after.offset, len(after.messages), after.tools) == (0, 3, TOOLS)


def test_a_route_keeps_only_its_most_recently_used_lanes() -> None:
    """The agent picks the model names: each name's requests were kept until the end."""
    history = LaneHistory()
    messages = [{"c": "task"}]
    for lane in range(LANES_KEPT + 1):
        history.delta(f"lane-{lane}", messages, [])
        history.delta("main", messages, [])  # used all along: never the oldest
    assert history.delta("main", [*messages, {"c": "new"}], []).offset == 1
    assert history.delta(f"lane-{LANES_KEPT}", messages, []).offset == 1
    assert history.delta("lane-0", messages, []).offset == 0  # forgotten: recorded whole


def test_a_route_keeps_the_prompt_ids_of_its_most_recently_used_lanes_only() -> None:
    endpoint = ResolvedEndpoint("http://127.0.0.1:9/v1", "", "m")
    route = Route("t", "r", endpoint, CaptureSpec(), on_turn=lambda turn: None)
    raw = b",".join(b"%d" % n for n in range(1000, 5000))
    first = route.decode_prompt_ids("lane-0", raw)
    assert route.decode_prompt_ids("lane-0", raw) is first  # kept: not decoded again
    for lane in range(1, LANES_KEPT + 1):
        route.decode_prompt_ids(f"lane-{lane}", raw)
    again = route.decode_prompt_ids("lane-0", raw)
    assert again == first
    assert again is not first  # forgotten, decoded again


def test_prompt_id_cache_reuses_the_shared_prefix_exactly() -> None:
    generator = random.Random(7)
    cache = PromptIdCache()
    ids: list[int] = []
    for _ in range(200):
        keep = generator.randint(0, len(ids))
        ids = ids[:keep] + [generator.randint(0, 200_000) for _ in range(generator.randint(0, 30))]
        raw = b",".join(str(i).encode() for i in ids)
        assert cache.decode(raw) == ids


def test_prompt_id_cache_rejects_non_integers() -> None:
    assert PromptIdCache().decode(b'1,2,"x"') is None
    assert PromptIdCache().decode(b"1,2,{") is None


def test_prompt_ids_are_cut_out_of_the_response_bytes() -> None:
    body = b'{"id":"x","choices":[],"prompt_token_ids" : [1,2,3],"usage":{}}'
    rest, raw = cut_prompt_ids(body)
    assert raw == b"1,2,3"
    assert rest == b'{"id":"x","choices":[],"prompt_token_ids" : null,"usage":{}}'
    assert cut_prompt_ids(b'{"prompt_token_ids":null}') == (b'{"prompt_token_ids":null}', None)
    assert cut_prompt_ids(b'{"a":1}') == (b'{"a":1}', None)
