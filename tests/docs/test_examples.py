"""The examples that need a server, run as written from the README and docs/ pages: the server
by the README's own `make run`, the shell blocks with bash, the Python example with this
interpreter, the model played by the scripted upstream.

A block that stops working, or a page that stops saying what the code does, fails here.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from testing.server_process import ServerProcess
from tests.docs.pages import ROOT, Block, claimed_output, marked_blocks

pytestmark = pytest.mark.e2e

BLOCKS = marked_blocks()
UPSTREAM_KEY = "sk-readme-upstream-61d0"
UPSTREAM_MODEL = "readme-policy"


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL) as upstream:
        yield upstream


@pytest.fixture
def server(tmp_path: Path, upstream: FakeUpstream) -> Iterator[ServerProcess]:
    """The README's `make run`, with the upstream in the server's environment for `kind: vllm`."""
    [command] = BLOCKS["serve"].commands()
    env = {
        "VLLM_BASE_URL": upstream.base_url,
        "VLLM_MODEL": UPSTREAM_MODEL,
        "VLLM_API_KEY": UPSTREAM_KEY,
    }
    make = shlex.split(command)
    server = ServerProcess(tmp_path / "state", env, command=[make[0], "-C", str(ROOT), *make[1:]])
    server.env.pop("ROLLOUT_SANDBOX_IMAGE", None)  # the README runs on the shipped default image
    server.start()
    yield server
    server.stop()
    assert "Traceback" not in server.text(), server.text()


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str


async def _run(block: Block, server: ServerProcess, upstream: FakeUpstream) -> Ran:
    """Run `block` from the checkout, as a reader whose variables name the server and model.

    Run without blocking the loop: the scripted upstream answers from this loop.
    """
    env = {
        **os.environ,
        "ROLLOUT_TARGET": server.target,
        "ENDPOINT_URL": upstream.base_url,
        "ENDPOINT_MODEL": UPSTREAM_MODEL,
        "ENDPOINT_KEY": UPSTREAM_KEY,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    argv = {"bash": ["bash", "-euo", "pipefail", "-c"], "python": [sys.executable, "-c"]}
    process = await asyncio.create_subprocess_exec(
        *argv[block.language],
        block.code,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await process.communicate()
    assert process.returncode is not None
    return Ran(process.returncode, stdout.decode(), stderr.decode())


def _script_write(upstream: FakeUpstream, path: str, content: str) -> None:
    """The model's one move: write `content` into `path` with opencode's write tool."""
    arguments = json.dumps({"filePath": path, "content": content})
    upstream.script(Reply(tool_calls=[ToolCallReply("write", arguments)]), match=has_tools)


async def test_the_first_rollout_block(server: ServerProcess, upstream: FakeUpstream) -> None:
    ran = await _run(BLOCKS["first-rollout"], server, upstream)

    assert ran.code == 0, ran
    assert re.search(r"SUCCEEDED\s+reward 1\b", ran.stdout), ran.stdout


@pytest.mark.opencode
async def test_the_opencode_block(server: ServerProcess, upstream: FakeUpstream) -> None:
    _script_write(upstream, "hello.txt", "hello")

    ran = await _run(BLOCKS["opencode"], server, upstream)

    assert ran.code == 0, ran
    assert re.search(r"SUCCEEDED\s+reward 1\b", ran.stdout), ran.stdout
    assert upstream.requests, "opencode never called the model"
    # The key went upstream from the proxy, and appeared in no argv on the way.
    assert all(r.headers["authorization"] == f"Bearer {UPSTREAM_KEY}" for r in upstream.requests)


@pytest.mark.opencode
async def test_the_opencode_block_fails_its_require_reward_when_the_model_does_nothing(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    # The model only says "Done.": verify fails, the rollout SUCCEEDED with reward 0, and
    # --require-reward 1 turns that into exit 6, as the exit codes' table says.
    ran = await _run(BLOCKS["opencode"], server, upstream)

    assert ran.code == 6, ran
    assert re.search(r"SUCCEEDED\s+reward 0\b", ran.stdout), ran.stdout
    assert "reward 0: below --require-reward 1" in ran.stderr


@pytest.mark.opencode
async def test_the_spec_file_block(server: ServerProcess, upstream: FakeUpstream) -> None:
    _script_write(upstream, "hello.txt", "hello from the example\n")

    ran = await _run(BLOCKS["spec-file"], server, upstream)

    assert ran.code == 0, ran
    assert re.search(r"SUCCEEDED\s+reward 1\b", ran.stdout), ran.stdout
    assert "run=readme" in ran.stdout
    assert "example=task-yaml" in ran.stdout  # the file's labels, with the flag's


@pytest.mark.opencode
async def test_the_python_example_prints_what_its_page_says(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    _script_write(upstream, "hello.txt", "hello")

    ran = await _run(BLOCKS["python"], server, upstream)

    assert ran.code == 0, ran
    assert ran.stdout.strip() == claimed_output(BLOCKS["python"])


def test_the_local_rollout_block_needs_no_server(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TMPDIR": str(tmp_path),
        "ROLLOUT_TARGET": "127.0.0.1:1",  # nothing listens there: the block must not need it
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", BLOCKS["local-rollout"].code],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip

    assert ran.returncode == 0, ran
    assert re.search(r"SUCCEEDED\s+reward 1\b", ran.stdout), ran.stdout
    assert list(tmp_path.iterdir()) == []  # the server's state directory went with it


async def test_the_session_example_prints_what_its_page_says(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    ran = await _run(BLOCKS["session-python"], server, upstream)

    assert ran.code == 0, ran
    assert ran.stdout.splitlines() == ["output: 42", "VERIFIED 1.0"], ran


@pytest.mark.opencode
async def test_the_batch_block_runs_the_example_dataset_on_a_default_server(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    # The model only says "Done." (reward 0): what counts is that every rollout ran and was
    # scored on a server at its defaults, none rejected for a build it will not make.
    output = ROOT / "runs" / "harbor-dataset"
    shutil.rmtree(output, ignore_errors=True)
    try:
        ran = await _run(BLOCKS["batch"], server, upstream)

        assert ran.code == 0, ran
        lines = (output / "results.jsonl").read_text().splitlines()
        results = [json.loads(line) for line in lines]
        assert sorted({r["task"] for r in results}) == ["hello", "sum"]
        assert len(results) == 8
        assert {r["outcome"] for r in results} == {"scored"}, results
        assert re.search(r"all\s*│\s*8/8", ran.stdout), ran.stdout
    finally:
        shutil.rmtree(output, ignore_errors=True)
        if not any(output.parent.iterdir()):
            output.parent.rmdir()
