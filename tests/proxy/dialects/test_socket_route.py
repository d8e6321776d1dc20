"""A local sandbox's own route (its Unix socket, no token) serves the dialects as well."""

from __future__ import annotations

from pathlib import Path

import anthropic
import httpx2
import openai

from service.models import CaptureSpec, Dialect, Turn
from service.proxy import MAIN_MODEL_ALIAS, CaptureProxy, ResolvedEndpoint
from testing.fakes.llm_upstream import FakeUpstream, Reply
from tests.proxy.conftest import UPSTREAM_KEY, UPSTREAM_MODEL


async def test_messages_and_responses_over_a_sandbox_socket(
    proxy: CaptureProxy, upstream: FakeUpstream, state_dir: Path
) -> None:
    upstream.script(Reply(text="Hi."), Reply(text="Hello."))
    turns: list[Turn] = []
    endpoint = ResolvedEndpoint(upstream.base_url, UPSTREAM_KEY, UPSTREAM_MODEL)
    socket_path = state_dir / "route.sock"
    await proxy.open_sandbox_route("r", endpoint, CaptureSpec(), turns.append, socket_path)
    transport = httpx2.AsyncHTTPTransport(uds=str(socket_path))
    async with httpx2.AsyncClient(transport=transport) as http:
        claude = anthropic.AsyncAnthropic(
            base_url="http://sandbox", api_key="sandbox-route", http_client=http, max_retries=0
        )
        message = await claude.messages.create(
            model=MAIN_MODEL_ALIAS, max_tokens=50, messages=[{"role": "user", "content": "hi"}]
        )
        codex = openai.AsyncOpenAI(
            base_url="http://sandbox/v1", api_key="sandbox-route", http_client=http, max_retries=0
        )
        response = await codex.responses.create(model=MAIN_MODEL_ALIAS, input="hello")
    assert message.content[0].type == "text"
    assert response.output_text == "Hello."
    assert [turn.dialect for turn in turns] == [Dialect.MESSAGES, Dialect.RESPONSES]
    assert all(turn.token_ids_present and turn.translated for turn in turns)
