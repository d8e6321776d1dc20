"""The proxy inside a remote sandbox speaks the dialects too: bundled, and in either mode."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import anthropic

from service.models import Dialect, Turn
from service.proxy import MAIN_MODEL_ALIAS
from service.proxy.remote.bundle import source_files
from testing.fakes.llm_upstream import FakeUpstream, Reply
from tests.proxy.conftest import UPSTREAM_KEY, UPSTREAM_MODEL
from tests.proxy.remote.test_standalone import lines, start


def test_the_bundle_carries_the_dialects_subpackage() -> None:
    files = source_files()
    assert "service/proxy/dialects/handler.py" in files
    assert "service/proxy/dialects/__init__.py" in files


async def test_a_standalone_proxy_forwards_native_messages(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    upstream.script(Reply(text="Hello."))
    turns = tmp_path / "turns.jsonl"
    process = await start(
        "--base-url", upstream.base_url, "--model", UPSTREAM_MODEL, "--token", "tok-1",
        "--turns-file", str(turns), "--dialect-mode", "native",
    )  # fmt: skip
    assert process.stderr is not None
    try:
        ready = json.loads(await asyncio.wait_for(process.stderr.readline(), 10))
        root = ready["base_url"].removesuffix("/v1")
        client = anthropic.AsyncAnthropic(base_url=root, api_key="tok-1", max_retries=0)
        message = await client.messages.create(
            model=MAIN_MODEL_ALIAS,
            max_tokens=100,
            messages=[{"role": "user", "content": "hi"}],
        )
        [line] = await lines(turns, 1)
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 10)
    assert message.content[0].type == "text"
    assert upstream.requests[-1].path == "/v1/messages"
    assert upstream.requests[-1].headers["x-api-key"] == UPSTREAM_KEY
    turn = Turn.model_validate_json(line)
    assert (turn.dialect, turn.translated) == (Dialect.MESSAGES, False)
    assert turn.completion_text == "Hello."
