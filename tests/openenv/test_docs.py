"""docs/openenv.md's examples, run as written: the serve block in front of a real server (its
port made free by a later --listen), the Python examples against it (run_rollout with
opencode's model played by the scripted upstream, and the terminal)."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from testing.server_process import ServerProcess
from tests.docs.pages import ROOT, claimed_output, marked_blocks

pytestmark = pytest.mark.e2e

BLOCKS = marked_blocks()
KEY, MODEL = "sk-openenv-docs-5f21", "openenv-docs-policy"


@pytest.fixture
def door(rollout_server: ServerProcess, tmp_path: Path) -> Iterator[ServerProcess]:
    [command] = BLOCKS["openenv-serve"].commands()
    argv = shlex.split(command.replace('"$ROLLOUT_TARGET"', rollout_server.target))
    argv[0] = str(ROOT / argv[0])
    served = ServerProcess(tmp_path / "door", command=[*argv, "--listen", "127.0.0.1:0"])
    served.start()
    yield served
    served.stop()
    assert "Traceback" not in served.text(), served.text()


async def run_example(name: str, env: dict[str, str]) -> str:
    """The block's stdout, run as a script in the repository with `env`."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        BLOCKS[name].code,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()
    return stdout.decode().strip()


@pytest.mark.opencode
async def test_the_run_rollout_example_prints_what_its_page_says(door: ServerProcess) -> None:
    async with FakeUpstream(api_key=KEY, model=MODEL) as upstream:
        arguments = json.dumps({"filePath": "hello.txt", "content": "hello"})
        upstream.script(Reply(tool_calls=[ToolCallReply("write", arguments)]), match=has_tools)
        env = {
            **os.environ,
            "OPENENV_URL": door.target,
            "ENDPOINT_URL": upstream.base_url,
            "ENDPOINT_MODEL": MODEL,
            "ENDPOINT_KEY": KEY,
        }
        printed = await run_example("openenv-run-rollout", env)
    assert printed == claimed_output(BLOCKS["openenv-run-rollout"])
    assert "OpenEnv front door listening on http://127.0.0.1:" in door.text()


async def test_the_terminal_example_prints_what_its_page_says(door: ServerProcess) -> None:
    printed = await run_example("openenv-terminal", {**os.environ, "OPENENV_URL": door.target})
    assert printed == claimed_output(BLOCKS["openenv-terminal"])
