"""The standalone proxy (the one placed inside a remote sandbox) applies `--sampling` too,
and strips the agent's own sampling fields."""

from __future__ import annotations

import asyncio
import json

import httpx

from service.models import Sampling
from testing.fakes.llm_upstream import FakeUpstream
from tests.proxy.conftest import UPSTREAM_MODEL, chat
from tests.proxy.remote.test_standalone import start


async def test_the_standalone_proxy_sets_the_sampling_it_is_given(upstream: FakeUpstream) -> None:
    sampling = Sampling(seed=5, top_p=0.5).model_dump_json(exclude_none=True)
    process = await start(
        "--listen", "127.0.0.1:0", "--base-url", upstream.base_url, "--model", UPSTREAM_MODEL,
        "--turns-file", "/dev/null", f"--sampling={sampling}",
    )  # fmt: skip
    assert process.stderr is not None
    try:
        ready = json.loads(await asyncio.wait_for(process.stderr.readline(), 10))
        async with httpx.AsyncClient() as client:
            body = {**chat("hi"), "seed": 1, "temperature": 0.7}
            response = await client.post(f"{ready['base_url']}/chat/completions", json=body)
        assert response.status_code == 200
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 10)
    received = upstream.requests[-1].body
    assert received is not None
    assert (received["seed"], received["top_p"]) == (5, 0.5)
    assert "temperature" not in received
