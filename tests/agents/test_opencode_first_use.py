"""opencode on a new machine, through a real server: an empty cache, a broken npm, no npm.

Each server here gets a cache directory that does not exist yet (as `~/.cache/rollout-service`
on a new machine), made under the home directory because every sandbox replaces /tmp.
"""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from testing.server_process import ServerProcess
from tests.agents.npm_registry import FakeNpmRegistry
from tests.e2e.processes import eventually

pytestmark = pytest.mark.e2e

UPSTREAM_KEY = "sk-first-use-4e1a"
UPSTREAM_MODEL = "fake-policy-first-use"
CONTENT = "hello from a new machine"


@pytest.fixture
def home_scratch() -> Iterator[Path]:
    """A directory under ~/.cache that does not exist yet (sandboxes replace /tmp)."""
    path = Path.home() / ".cache" / f"rollout-test-{uuid.uuid4().hex[:10]}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL) as upstream:
        yield upstream


def _server(tmp_path: Path, cache_dir: Path, **env: str) -> ServerProcess:
    return ServerProcess(tmp_path / "state", env={"ROLLOUT_CACHE_DIR": str(cache_dir), **env})


def _opencode_spec(upstream: FakeUpstream) -> pb.RolloutSpec:
    endpoint = pb.Endpoint(base_url=upstream.base_url, api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL)
    return pb.RolloutSpec(
        task=pb.Task(instruction="Create hello.txt.", verify=[f"grep -qx '{CONTENT}' hello.txt"]),
        agent=pb.Agent(name="opencode"),
        endpoint=endpoint,
    )


async def _run_watched(target: str, spec: pb.RolloutSpec) -> tuple[pb.Rollout, list[str]]:
    """Start, watch to the end, get: the rollout and its CREATING_SANDBOX messages."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        started = await stub.StartRollout(pb.StartRolloutRequest(spec=spec))
        request = pb.WatchRolloutRequest(rollout_id=started.rollout.id)
        events = [response.event async for response in stub.WatchRollout(request)]
        got = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=started.rollout.id))
    messages = [
        e.phase.message
        for e in events
        if e.HasField("phase") and e.phase.phase == pb.PHASE_CREATING_SANDBOX and e.phase.message
    ]
    return got.rollout, messages


@pytest.mark.opencode
@pytest.mark.timeout(600)
async def test_the_first_opencode_rollout_on_an_empty_cache_reaches_reward_one(
    tmp_path: Path, home_scratch: Path, upstream: FakeUpstream
) -> None:
    # The warm sandbox is made at start-up, before anything is installed: it must still see
    # the cache, and the install must be done before the rollout takes it.
    cache_dir = home_scratch / "cache"
    arguments = json.dumps({"filePath": "hello.txt", "content": CONTENT})
    upstream.script(Reply(tool_calls=[ToolCallReply("write", arguments)]), match=has_tools)
    server = _server(tmp_path, cache_dir, ROLLOUT_LOCAL_WARM_SANDBOXES="1")
    target = server.start()
    try:
        rollout, messages = await _run_watched(target, _opencode_spec(upstream))
    finally:
        assert server.stop() == 0, server.text()

    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, (rollout.result.error, server.text())
    assert rollout.result.reward == pytest.approx(1.0)
    assert rollout.result.files["hello.txt"].decode().strip() == CONTENT
    # The install was reported while it ran, not a silent minute in CREATING_SANDBOX.
    assert messages[0].startswith("installing opencode-ai@"), messages
    assert messages[-1].startswith("installed opencode-ai@"), messages
    assert list(cache_dir.glob("opencode/*/installed-binary"))


async def test_an_install_that_fails_is_agent_install_not_agent(
    tmp_path: Path, home_scratch: Path, upstream: FakeUpstream
) -> None:
    # A registry without opencode-ai stands in for an unreachable one (npm says E404 at once).
    async with FakeNpmRegistry() as registry:
        server = _server(
            tmp_path,
            home_scratch / "cache",
            npm_config_registry=registry.url,
            npm_config_cache=str(home_scratch / "npm-cache"),
        )
        target = server.start()
        try:
            rollout, messages = await _run_watched(target, _opencode_spec(upstream))
        finally:
            assert server.stop() == 0, server.text()

    assert rollout.status == pb.ROLLOUT_STATUS_FAILED
    assert rollout.result.error.kind == pb.ERROR_KIND_AGENT_INSTALL, rollout.result.error
    assert "installing opencode-ai@" in rollout.result.error.message
    assert "E404" in rollout.result.error.message
    assert messages[0].startswith("installing opencode-ai@")
    # The install failed before any sandbox was made for the rollout.
    assert not rollout.result.sandbox_id
    assert upstream.requests == []


@pytest.fixture
def path_without_npm(home_scratch: Path) -> str:
    """A PATH holding every host tool but npm and npx (where a Debian machine has both, in
    /usr/bin), under the home directory so that sandboxes see it as they see any PATH."""
    shims = home_scratch / "bin"
    shims.mkdir(parents=True)
    for directory in ("/usr/local/bin", "/usr/bin", "/bin"):
        for tool in Path(directory).iterdir():
            target = shims / tool.name
            if tool.name not in {"npm", "npx"} and not target.exists():
                target.symlink_to(tool)
    return f"{Path(sys.executable).parent}:{shims}"


async def test_without_npm_the_server_serves_and_refuses_opencode_at_admission(
    tmp_path: Path, home_scratch: Path, path_without_npm: str, upstream: FakeUpstream
) -> None:
    server = _server(tmp_path, home_scratch / "cache", PATH=path_without_npm)
    target = server.start()
    try:
        await eventually(lambda: "rejected until npm is installed" in server.text())
        async with grpc.aio.insecure_channel(target) as channel:
            stub = pb_grpc.RolloutServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.StartRollout(pb.StartRolloutRequest(spec=_opencode_spec(upstream)))
            command = pb.RolloutSpec(
                task=pb.Task(instruction="x", verify=["test -f done"]),
                agent=pb.Agent(name="command", command="touch done"),
            )
            ran = await stub.RunRollout(pb.RunRolloutRequest(spec=command))
    finally:
        assert server.stop() == 0, server.text()

    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.agent.name" in (refused.value.details() or "")
    assert "npm is not on the server's PATH" in (refused.value.details() or "")
    assert ran.rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, ran.rollout.result.error
    assert ran.rollout.result.reward == pytest.approx(1.0)
