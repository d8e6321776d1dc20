"""Sampling overrides as the upstream receives them through the real proxy."""

from __future__ import annotations

import httpx

from service.models import CaptureSpec, Sampling
from tests.fakes.llm_upstream import FakeUpstream
from tests.proxy.capture.test_rewrite import sent_upstream
from tests.proxy.conftest import OpenRollout, chat


async def test_sampling_replaces_the_agents_values(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    capture = CaptureSpec(sampling=Sampling(seed=77, temperature=0.3, top_p=0.9))
    body = {**chat("hi"), "seed": 1, "temperature": 1.5, "top_p": 1.0}
    received = await sent_upstream(open_rollout, agent, upstream, body, capture)
    assert (received["seed"], received["temperature"], received["top_p"]) == (77, 0.3, 0.9)


async def test_unset_sampling_leaves_the_agents_values(
    open_rollout: OpenRollout, agent: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    capture = CaptureSpec(sampling=Sampling(temperature=0.3))
    body = {**chat("hi"), "seed": 5, "top_p": 0.8}
    received = await sent_upstream(open_rollout, agent, upstream, body, capture)
    assert (received["seed"], received["temperature"], received["top_p"]) == (5, 0.3, 0.8)
    plain = await sent_upstream(open_rollout, agent, upstream, chat("hi"))
    assert not {"seed", "temperature", "top_p"} & set(plain)
