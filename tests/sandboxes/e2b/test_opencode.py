"""The full opencode rollout on E2B: a real server subprocess, its e2b SDK pointed at the fake
cloud on loopback, real opencode in the fake sandbox (taken from the template, as a template
built by scripts/build_e2b_template.py provides it), the capture proxy started inside the
sandbox, and the scripted upstream as the trainer's endpoint."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.agents.base import AgentContext
from service.agents.opencode import OpencodeAgent
from service.agents.opencode_config import LAUNCHER
from service.config import Settings
from service.models import NetworkPolicy
from service.sandboxes.e2b.backend import E2BBackend
from testing.e2b_support import fake_cloud, make_backend, make_request, opencode_template
from testing.fakes.e2b_cloud import FakeE2B
from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from testing.server_process import ServerProcess
from tests.agents.npm_registry import FakeNpmRegistry

pytestmark = pytest.mark.opencode

UPSTREAM_KEY = "sk-upstream-secret-e2b-opencode-77c1"
UPSTREAM_MODEL = "fake-policy-7b"
TEMPLATE = "opencode-template"
CONTENT = "hello from e2b"


@pytest.fixture
async def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeE2B]:
    async with fake_cloud(tmp_path, monkeypatch) as fake:
        fake.add_template(TEMPLATE, await opencode_template())
        yield fake


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL) as upstream:
        yield upstream


@pytest.fixture
async def server(cloud: FakeE2B, tmp_path: Path) -> AsyncIterator[ServerProcess]:
    # The cache lies under /tmp, which the fake sandbox replaces with its own, so the harness
    # cannot see the host's opencode there and looks in the sandbox, as on real E2B.
    env = cloud.environment() | {
        "ROLLOUT_E2B_CREATES_PER_S": "0",
        "ROLLOUT_CACHE_DIR": str(tmp_path / "cache"),
    }
    server = ServerProcess(tmp_path / "state", env=env)
    await asyncio.to_thread(server.start)  # the fake cloud shares this event loop
    yield server
    assert await asyncio.to_thread(server.stop) == 0, server.text()


def _spec(upstream: FakeUpstream) -> pb.RolloutSpec:
    return pb.RolloutSpec(
        task=pb.Task(
            instruction="Create hello.txt with a friendly line.",
            verify=[f"grep -qx '{CONTENT}' hello.txt"],
        ),
        agent=pb.Agent(name="opencode"),
        endpoint=pb.Endpoint(
            base_url=upstream.base_url, api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL
        ),
        sandbox=pb.SandboxSpec(backend="e2b", template=TEMPLATE, network=pb.NETWORK_POLICY_NONE),
    )


@pytest.mark.e2e
async def test_opencode_on_e2b_with_the_proxy_inside_sends_live_turns_and_scores_1(
    server: ServerProcess, cloud: FakeE2B, upstream: FakeUpstream
) -> None:
    arguments = json.dumps({"filePath": "hello.txt", "content": CONTENT + "\n"})
    upstream.script(Reply(tool_calls=[ToolCallReply("write", arguments)]), match=has_tools)
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        started = await stub.StartRollout(pb.StartRolloutRequest(spec=_spec(upstream)))
        watch = pb.WatchRolloutRequest(rollout_id=started.rollout.id)
        events = [response.event async for response in stub.WatchRollout(watch)]
        got = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=started.rollout.id))

    rollout = got.rollout
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, (rollout.result.error, server.text())
    assert rollout.result.reward == pytest.approx(1.0)
    # Live: turns are published during the agent phase, before verification begins.
    kinds = [e.WhichOneof("payload") for e in events]
    verifying = next(
        i
        for i, e in enumerate(events)
        if e.HasField("phase") and e.phase.phase == pb.PHASE_VERIFYING
    )
    assert "turn" in kinds[:verifying]
    turns = list(rollout.result.turns)
    assert [e.turn.index for e in events if e.HasField("turn")] == [t.index for t in turns]
    trainable = [t for t in turns if t.trainable]
    assert len(trainable) == len([r for r in upstream.requests if has_tools(r.body or {})])
    by_ids = {tuple(s.completion_token_ids) for s in upstream.sent}
    assert all(tuple(t.completion_token_ids) in by_ids for t in turns)
    assert any(not t.trainable for t in turns)  # opencode's title call, on the small alias
    # The sandbox was opened to the upstream's host only, and is gone; so is the verifier's,
    # made from setup's snapshot (FRESH).
    sandbox_id = rollout.result.sandbox_id
    (verifier_id,) = set(cloud.records) - {sandbox_id}
    assert cloud.records[verifier_id].template in cloud.snapshots
    assert cloud.network_updates == [
        (sandbox_id, {"allowOut": ["127.0.0.1"], "denyOut": ["0.0.0.0/0"]})
    ]
    assert cloud.live_ids() == set()
    commands = _commands(cloud, sandbox_id)
    # The key reached the upstream (through the proxy's environment, never argv), and nothing else.
    environments = [config.get("envs", {}) for config in cloud.records[sandbox_id].sandbox.started]
    assert len([env for env in environments if UPSTREAM_KEY in env.values()]) == 1
    verifier_started = cloud.records[verifier_id].sandbox.started
    assert not any(UPSTREAM_KEY in json.dumps(config) for config in verifier_started)
    assert not any(UPSTREAM_KEY in command for command in commands)
    assert all(r.headers["authorization"] == f"Bearer {UPSTREAM_KEY}" for r in upstream.requests)
    assert not any(UPSTREAM_KEY.encode() in e.SerializeToString() for e in events)
    assert UPSTREAM_KEY.encode() not in rollout.SerializeToString()
    assert UPSTREAM_KEY not in server.text()


@pytest.fixture
async def backend(cloud: FakeE2B, tmp_path: Path) -> AsyncIterator[E2BBackend]:
    # As in the server above: the host cache is out of the fake sandbox's sight.
    backend = make_backend(tmp_path, cache_dir=tmp_path / "cache")
    yield backend
    await backend.close()


def _context(env: dict[str, str] | None = None) -> AgentContext:
    return AgentContext(
        rollout_id="r-oc", instruction="x", command="", options={}, timeout_s=60, env=env or {}
    )


def _commands(cloud: FakeE2B, sandbox_id: str) -> list[str]:
    return [" ".join(c.get("args", [])) for c in cloud.records[sandbox_id].sandbox.started]


async def test_a_template_with_opencode_skips_the_install(
    backend: E2BBackend, cloud: FakeE2B, tmp_path: Path
) -> None:
    request = make_request(network=NetworkPolicy.NONE, template=TEMPLATE)
    sandbox = await backend.create(request)
    agent = OpencodeAgent(Settings(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache"))

    await agent.prepare(sandbox, _context())

    launcher = await sandbox.read_file(LAUNCHER, max_bytes=4096)
    assert launcher is not None
    assert b"exec /home/user/.local/bin/opencode run" in launcher
    installed = await sandbox.exec("test -e /home/user/.opencode-npm", timeout_s=30)
    assert installed.exit_code == 1  # npm never ran


async def test_without_it_the_pinned_opencode_is_npm_installed_in_the_sandbox(
    backend: E2BBackend, cloud: FakeE2B, tmp_path: Path
) -> None:
    settings = Settings(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")
    sandbox = await backend.create(make_request(network=NetworkPolicy.FULL))
    async with FakeNpmRegistry() as registry:
        registry.publish_opencode(settings.opencode_version)
        await OpencodeAgent(settings).prepare(
            sandbox, _context({"npm_config_registry": registry.url})
        )
        assert registry.hits["/opencode-ai"] >= 1

    launcher = await sandbox.read_file(LAUNCHER, max_bytes=4096)
    assert launcher is not None
    assert b"/home/user/.opencode-npm/node_modules/opencode-linux-" in launcher
    (install,) = [c for c in _commands(cloud, sandbox.id) if "npm install" in c]
    assert f"opencode-ai@{settings.opencode_version}" in install
