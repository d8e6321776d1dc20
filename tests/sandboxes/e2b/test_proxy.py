"""Model access for E2B sandboxes: the capture proxy started inside the sandbox (its turns
followed live), the service's proxy at a public URL (host placement), and network NONE opened
to the one host the proxy needs. The real `e2b` SDK against the fake cloud on loopback, with
the scripted upstream standing in for the trainer's endpoint."""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.config import Settings
from service.engine.lifecycle import ModelAttachment
from service.engine.model_access import ModelRouter
from service.errors import SandboxError
from service.models import (
    CaptureSpec,
    EndpointSpec,
    NetworkPolicy,
    RolloutSpec,
    SandboxSpec,
    TaskSpec,
    Turn,
)
from service.proxy.remote.bundle import source_digest
from service.proxy.remote.placement import Probe, choose_layout
from service.proxy.server import CaptureProxy
from service.sandboxes.e2b.backend import E2BBackend
from service.sandboxes.e2b.sandbox import E2BSandbox
from testing.e2b_support import eventually, make_backend, make_request
from testing.fakes.e2b_cloud import FakeE2B
from testing.fakes.llm_upstream import FakeUpstream, Reply, TokenShape

UPSTREAM_KEY = "sk-upstream-secret-e2b-3f9a"
UPSTREAM_MODEL = "fake-policy-e2b"
GO_FILE = "/tmp/agent-may-exit"
CLIENT = f"""
import json, os, sys, time, urllib.request
request = urllib.request.Request(
    os.environ["BASE_URL"] + "/chat/completions",
    data=json.dumps({{"model": os.environ["MODEL"], "stream": True,
                     "messages": [{{"role": "user", "content": "hi"}}]}}).encode(),
    headers={{"Authorization": "Bearer " + os.environ["API_KEY"],
             "Content-Type": "application/json"}},
)
with urllib.request.urlopen(request) as response:
    body = response.read().decode()
print("streamed", body.count("data:"), "events", flush=True)
while not os.path.exists({GO_FILE!r}):
    time.sleep(0.02)
"""


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL) as upstream:
        yield upstream


@pytest.fixture
async def backend(cloud: FakeE2B, tmp_path: Path) -> AsyncIterator[E2BBackend]:
    backend = make_backend(tmp_path)
    yield backend
    await backend.close()


@pytest.fixture
async def sandbox(backend: E2BBackend) -> AsyncIterator[E2BSandbox]:
    sandbox = await backend.create(make_request(network=NetworkPolicy.NONE))
    yield sandbox
    await sandbox.kill()


def _spec(upstream: FakeUpstream, network: NetworkPolicy = NetworkPolicy.NONE) -> RolloutSpec:
    return RolloutSpec(
        task=TaskSpec(instruction="say hi"),
        endpoint=EndpointSpec(
            base_url=upstream.base_url, api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL
        ),
        sandbox=SandboxSpec(backend="e2b", network=network),
        capture=CaptureSpec(top_logprobs=2),
    )


def _router(proxy: CaptureProxy, settings: Settings) -> ModelRouter:
    return ModelRouter(proxy, {}, settings)


async def _attached(
    router: ModelRouter, spec: RolloutSpec, sandbox: E2BSandbox, turns: list[Turn]
) -> AsyncIterator[ModelAttachment]:
    attach = router.attacher("rollout-e2b-1", spec, router.resolve(spec, required=True))
    assert attach is not None
    async with attach(sandbox, turns.append) as attachment:
        yield attachment


def _processes_with(needle: bytes, kind: str) -> list[int]:
    """Host pids whose /proc/<pid>/<kind> (cmdline, environ) contains `needle`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / kind).read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def test_the_proxy_inside_the_sandbox_sends_turns_while_the_agent_runs(
    sandbox: E2BSandbox, cloud: FakeE2B, upstream: FakeUpstream, tmp_path: Path
) -> None:
    upstream.script(Reply(text="hello from the policy", shape=TokenShape.VLLM))
    settings = Settings(state_dir=tmp_path / "state")
    turns: list[Turn] = []
    async for attachment in _attached(
        _router(CaptureProxy(settings), settings), _spec(upstream), sandbox, turns
    ):
        access = attachment.access
        assert access.base_url.startswith("http://127.0.0.1:")
        assert access.api_key != UPSTREAM_KEY
        # Network NONE: opened to the upstream's host, and only to it.
        assert cloud.network_updates == [
            (sandbox.id, {"allowOut": ["127.0.0.1"], "denyOut": ["0.0.0.0/0"]})
        ]
        env = {"BASE_URL": access.base_url, "API_KEY": access.api_key, "MODEL": access.model}
        agent = await sandbox.spawn(f"python3 -c {shlex.quote(CLIENT)}", env=env)
        # The turn arrives while the agent still runs: it waits for GO_FILE to exit.
        await eventually(lambda: len(turns) == 1, timeout_s=30)
        assert _processes_with(UPSTREAM_KEY.encode(), "cmdline") == []
        assert _processes_with(UPSTREAM_KEY.encode(), "environ") != []  # the proxy's, only
        await sandbox.write_files({GO_FILE: b""})
        result = await agent.wait()
        assert result.exit_code == 0, result.stderr
        assert "streamed" in result.stdout
        assert attachment.calls is not None
        assert not attachment.calls.all_failed
    (turn,) = turns
    (sent,) = upstream.sent
    assert turn.trainable
    assert turn.token_ids_present
    assert turn.prompt_token_ids == sent.prompt_token_ids
    assert turn.completion_token_ids == sent.completion_token_ids
    assert turn.logprobs == sent.logprobs
    assert turn.completion_text == "hello from the policy"
    assert upstream.requests[-1].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert UPSTREAM_KEY not in turn.model_dump_json()
    assert _processes_with(access.api_key.encode(), "cmdline") == []  # the proxy is gone


async def test_every_failed_call_upstream_marks_the_attachment_all_failed(
    backend: E2BBackend, cloud: FakeE2B, upstream: FakeUpstream, tmp_path: Path
) -> None:
    upstream.script(Reply(status=503, error_message="overloaded"))
    settings = Settings(state_dir=tmp_path / "state")
    turns: list[Turn] = []
    spec = _spec(upstream, NetworkPolicy.FULL)
    sandbox = await backend.create(make_request(network=NetworkPolicy.FULL))
    async for attachment in _attached(
        _router(CaptureProxy(settings), settings), spec, sandbox, turns
    ):
        assert cloud.network_updates == []  # FULL: nothing to open
        access = attachment.access
        env = {"BASE_URL": access.base_url, "API_KEY": access.api_key, "MODEL": access.model}
        await sandbox.write_files({GO_FILE: b""})
        result = await sandbox.exec(f"python3 -c {shlex.quote(CLIENT)}", timeout_s=60, env=env)
        assert "HTTP Error 503" in result.stderr
        await eventually(lambda: len(turns) == 1, timeout_s=30)
        assert attachment.calls is not None
        assert attachment.calls.all_failed
    assert turns[0].upstream_status == 503
    assert "overloaded" in turns[0].upstream_error


async def test_a_public_url_puts_the_proxy_on_the_host(
    sandbox: E2BSandbox, cloud: FakeE2B, upstream: FakeUpstream, tmp_path: Path
) -> None:
    settings = Settings(state_dir=tmp_path / "state", proxy_listen="127.0.0.1:0")
    proxy = CaptureProxy(settings)
    await proxy.start()
    try:
        public = settings.model_copy(update={"proxy_public_url": proxy.url + "/"})
        turns: list[Turn] = []
        async for attachment in _attached(_router(proxy, public), _spec(upstream), sandbox, turns):
            access = attachment.access
            assert access.base_url.startswith(f"{proxy.url}/r/")
            assert cloud.network_updates == [
                (sandbox.id, {"allowOut": ["127.0.0.1"], "denyOut": ["0.0.0.0/0"]})
            ]
            env = {"BASE_URL": access.base_url, "API_KEY": access.api_key, "MODEL": access.model}
            await sandbox.write_files({GO_FILE: b""})
            result = await sandbox.exec(f"python3 -c {shlex.quote(CLIENT)}", timeout_s=60, env=env)
            assert result.exit_code == 0, result.stderr
            assert len(turns) == 1  # recorded by the service's own proxy, in this process
        assert turns[0].token_ids_present
        assert turns[0].completion_token_ids == upstream.sent[0].completion_token_ids
        started = [" ".join(c.get("args", [])) for c in cloud.records[sandbox.id].sandbox.started]
        assert started
        assert not any("service.proxy" in command for command in started)
    finally:
        await proxy.stop()


def _probe(**fields: object) -> Probe:
    found: dict[str, object] = {
        "version": (3, 11),
        "abi": "cpython-311-linux-x86_64",
        "libraries": False,
        "digest": "",
    }
    return Probe(**(found | fields))  # type: ignore[arg-type]


def test_a_template_with_this_proxy_needs_no_upload() -> None:
    layout = choose_layout(_probe(libraries=True, digest=source_digest()))
    assert layout.upload == ()
    assert layout.sources == "/opt/rollout-proxy/src"


def test_a_template_with_the_libraries_gets_only_the_sources() -> None:
    layout = choose_layout(_probe(libraries=True, digest="an-older-proxy"))
    assert layout.upload == ("sources",)
    assert (layout.sources, layout.libraries) == (
        "/tmp/rollout-proxy/src",
        "/opt/rollout-proxy/lib",
    )


def test_a_bare_sandbox_gets_the_libraries_only_if_its_abi_is_ours(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        "service.proxy.remote.placement.host_abi", lambda: "cpython-311-linux-x86_64"
    )
    assert choose_layout(_probe()).upload == ("sources", "libraries")
    with pytest.raises(SandboxError, match=r"cpython-312.*build_e2b_template\.py"):
        choose_layout(_probe(abi="cpython-312-linux-x86_64"))
    with pytest.raises(SandboxError, match=r"Python >= 3\.11, the sandbox has 3\.10"):
        choose_layout(_probe(version=(3, 10), libraries=True))
