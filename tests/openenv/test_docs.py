"""docs/openenv.md's examples, run as written: the serve block in front of a real server (its
port made free by a later --listen), the Python example against it, opencode's model played by
the scripted upstream."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.pages import ROOT, claimed_output, marked_blocks
from tests.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from tests.server_process import ServerProcess

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
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            BLOCKS["openenv-run-rollout"].code,
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()
    assert stdout.decode().strip() == claimed_output(BLOCKS["openenv-run-rollout"])
    assert "OpenEnv front door listening on http://127.0.0.1:" in door.text()
