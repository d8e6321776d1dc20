"""Every `rollout get ROLLOUT_ID --json | jq ...` line of the README and docs/, run against a
real rollout with model turns: each must print what it names, never a null."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rollout_client import AsyncRolloutClient

from testing.fakes.llm_upstream import FakeUpstream
from testing.specs import model_calls
from tests.docs.pages import doc_pages

pytestmark = pytest.mark.e2e

MODEL = "jq-policy"
JQ_LINE = re.compile(r"^rollout get ROLLOUT_ID --json \| jq .*$", flags=re.MULTILINE)
EXAMPLES = sorted({line for page in doc_pages() for line in JQ_LINE.findall(page.read_text())})


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(model=MODEL) as upstream:
        yield upstream


def test_the_docs_have_jq_examples() -> None:
    assert len(EXAMPLES) >= 3, EXAMPLES


async def test_every_jq_example_prints_no_null(upstream: FakeUpstream, server_target: str) -> None:
    spec = {
        "task": {"instruction": "call the model twice", "verify": ["test -f done"]},
        "agent": {"name": "command", "command": model_calls(2)},
        "endpoint": {"base_url": upstream.base_url, "model": MODEL},
    }
    async with AsyncRolloutClient(server_target) as client:  # the upstream answers on this loop
        rollout_id = (await client.run(spec)).id
    env = {
        **os.environ,
        "ROLLOUT_TARGET": server_target,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    for example in EXAMPLES:
        command = example.replace("ROLLOUT_ID", rollout_id)
        argv = ["bash", "-euo", "pipefail", "-c", command]
        done = await asyncio.to_thread(
            subprocess.run, argv, capture_output=True, text=True, env=env
        )
        assert done.returncode == 0, (example, done.stderr)
        assert done.stdout.strip(), example
        assert "null" not in done.stdout, (example, done.stdout)
