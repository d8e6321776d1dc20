"""The proxy as its own process: ready line, one flushed JSON line per turn, key from env only."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from service.models import Turn
from service.proxy.remote.standalone import API_KEY_ENV, OnTurnWriter
from testing.fakes.llm_upstream import FakeUpstream, Reply, TokenShape
from tests.proxy.conftest import UPSTREAM_KEY, UPSTREAM_MODEL, chat

ROOT = Path(__file__).resolve().parents[3]


async def start(*args: str, key: str = UPSTREAM_KEY) -> asyncio.subprocess.Process:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), API_KEY_ENV: key}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service.proxy.remote.standalone", *args,
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


@pytest.fixture
async def standalone(
    upstream: FakeUpstream, tmp_path: Path
) -> AsyncIterator[tuple[str, Path, int]]:
    turns = tmp_path / "turns.jsonl"
    process = await start(
        "--listen", "127.0.0.1:0", "--base-url", upstream.base_url, "--model", UPSTREAM_MODEL,
        "--token", "route-token-1", "--turns-file", str(turns), "--top-logprobs", "2",
    )  # fmt: skip
    assert process.stderr is not None
    ready = json.loads(await asyncio.wait_for(process.stderr.readline(), 10))
    try:
        yield ready["base_url"], turns, process.pid
    finally:
        process.terminate()
        assert await asyncio.wait_for(process.wait(), 10) == 0


async def lines(path: Path, count: int) -> list[str]:
    async with asyncio.timeout(5):
        # A file written by another process: nothing to wait on but the file itself.
        while not path.exists() or len(found := path.read_text().splitlines()) < count:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    return found


async def test_each_turn_becomes_one_json_line(
    standalone: tuple[str, Path, int], upstream: FakeUpstream
) -> None:
    base_url, turns_file, pid = standalone
    assert base_url.endswith("/r/route-token-1/v1")
    upstream.script(
        Reply(text="first answer", shape=TokenShape.TOKEN_ID_STRINGS), Reply(text="second")
    )
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{base_url}/chat/completions", json=chat("hi"))
        assert response.status_code == 200
        [first] = await lines(turns_file, 1)  # written as soon as the turn completed
        async with client.stream(
            "POST", f"{base_url}/chat/completions", json=chat("hi", "a", "b", stream=True)
        ) as streamed:
            await streamed.aread()
    second = (await lines(turns_file, 2))[1]
    turns = [Turn.model_validate_json(line) for line in (first, second)]
    assert turns[0].completion_token_ids == upstream.sent[0].completion_token_ids
    assert turns[0].logprobs == upstream.sent[0].logprobs
    assert len(turns[0].top_logprobs[0]) == 2
    assert (turns[1].stream, turns[1].request_message_offset, turns[1].completion_text) == (
        True,
        1,
        "second",
    )
    assert turns[1].prompt_token_ids == upstream.sent[1].prompt_token_ids != []
    assert upstream.requests[0].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert UPSTREAM_KEY not in turns_file.read_text()
    assert UPSTREAM_KEY.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()


async def test_a_missing_model_is_named_and_fails(upstream: FakeUpstream) -> None:
    process = await start("--base-url", upstream.base_url)
    _, stderr = await asyncio.wait_for(process.communicate(), 10)
    assert process.returncode != 0
    assert b"spec.endpoint.model" in stderr


@pytest.mark.parametrize(
    ("raw", "ids"),
    [(b"1, 2,3", [1, 2, 3]), (b"1,\n2", [1, 2]), (None, [4, 5])],
)
def test_the_writer_splices_the_upstreams_prompt_id_bytes(
    raw: bytes | None, ids: list[int]
) -> None:
    out = io.BytesIO()
    writer = OnTurnWriter(out)
    writer.prompt_ids_json = lambda turn: raw
    turn = Turn(index=3, prompt_token_ids=ids, request_messages=[{"role": "user", "content": "x"}])
    writer(turn)
    line = out.getvalue()
    assert line.count(b"\n") == 1
    assert line.endswith(b"\n")
    assert Turn.model_validate_json(line) == turn
