"""The opencode harness end to end: real opencode in a real bwrap sandbox, talking through the
real capture proxy to a scripted upstream on loopback."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import uuid
from typing import Any

import pytest

from service.agents.base import AgentContext
from service.agents.opencode import OpencodeAgent
from service.agents.opencode_config import LAUNCHER, MODELS_CACHE, XDG_ROOT
from service.config import Settings
from service.errors import AgentError
from service.models import AgentOutput, AgentOutputKind, NetworkPolicy, SandboxSpec
from service.proxy.capture.rewrite import AUX_MODEL_ALIAS, MAIN_MODEL_ALIAS
from service.sandboxes.base import WORKDIR, SandboxRequest
from service.sandboxes.local.backend import LocalBackend
from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from testing.fakes.public_host import public_host
from tests.agents.conftest import UPSTREAM_KEY, Rig
from tests.agents.npm_registry import FakeNpmRegistry, host_npm_arch
from tests.agents.processes import TIMEOUT_S, running, until

pytestmark = pytest.mark.opencode

CONTENT = "hello from the scripted model\n"


def _tool_names(upstream: FakeUpstream) -> set[str]:
    names: set[str] = set()
    for request in upstream.requests:
        for tool in (request.body or {}).get("tools", []):
            names.add(tool["function"]["name"])
    return names


async def test_a_tool_call_writes_a_file_and_the_title_call_is_not_trainable(
    rig: Rig, upstream: FakeUpstream
) -> None:
    arguments = json.dumps({"filePath": "hello.txt", "content": CONTENT})
    upstream.script(Reply(tool_calls=[ToolCallReply("write", arguments)]), match=has_tools)
    agent = OpencodeAgent(rig.settings)
    context = rig.context('Create hello.txt. Say "it\'s done" when `done`; $HOME stays as is.')

    await agent.prepare(rig.sandbox, context)
    outcome = await agent.run(rig.sandbox, context, rig.outputs.append)

    assert (outcome.exit_code, outcome.timed_out) == (0, False), outcome.log_tail
    assert await rig.sandbox.read_file(f"{WORKDIR}/hello.txt", max_bytes=1024) == CONTENT.encode()
    tool_calls = [o for o in rig.outputs if o.kind is AgentOutputKind.TOOL_CALL]
    assert [o.tool_name for o in tool_calls] == ["write"]
    assert json.loads(tool_calls[0].text)["content"] == CONTENT
    assert any(o.kind is AgentOutputKind.TEXT and o.text == "Done." for o in rig.outputs)
    # The instruction reaches the model verbatim: no shell or argv quoting on the way.
    body = upstream.requests[-1].body or {}
    first_user = next(m for m in body["messages"] if m["role"] == "user")
    assert first_user["content"] == context.instruction
    assert "webfetch" not in _tool_names(upstream)
    assert {"write", "bash", "read"} <= _tool_names(upstream)
    assert '"type":"tool_use"' in outcome.log_tail.replace(" ", "")
    # opencode's title call goes to the small-model alias, which the proxy marks not trainable.
    aux = [t for t in rig.turns if t.requested_model == AUX_MODEL_ALIAS]
    main = [t for t in rig.turns if t.requested_model == MAIN_MODEL_ALIAS]
    assert len(aux) == 1
    assert not aux[0].trainable
    assert len(main) == 2
    assert all(t.trainable for t in main)
    assert len(rig.turns) == 3
    # Only the proxy holds the upstream key: opencode had the route token.
    assert all(r.headers["authorization"] == f"Bearer {UPSTREAM_KEY}" for r in upstream.requests)
    assert not any(UPSTREAM_KEY in o.text for o in rig.outputs)
    assert UPSTREAM_KEY not in outcome.log_tail


async def test_the_empty_models_cache_changes_nothing_opencode_sends_or_prints(
    rig: Rig, upstream: FakeUpstream
) -> None:
    # The same task twice in one sandbox, opencode's state and the file wiped in between:
    # once as before the empty models.dev cache, once with it (the default).
    baseline = rig.settings.model_copy(update={"opencode_empty_models_cache": False})
    runs = []
    for settings in (baseline, rig.settings):
        await rig.sandbox.exec(f"rm -rf {XDG_ROOT} {WORKDIR}/hello.txt", timeout_s=30)
        arguments = json.dumps({"filePath": "hello.txt", "content": CONTENT})
        upstream.script(Reply(tool_calls=[ToolCallReply("write", arguments)]), match=has_tools)
        first_request = len(upstream.requests)
        outputs: list[AgentOutput] = []
        agent = OpencodeAgent(settings)
        context = rig.context("Create hello.txt.")
        await agent.prepare(rig.sandbox, context)
        cache = await rig.sandbox.read_file(MODELS_CACHE, max_bytes=1024)
        outcome = await agent.run(rig.sandbox, context, outputs.append)
        assert outcome.exit_code == 0, outcome.log_tail
        requests = [_without_ids(r.body or {}) for r in upstream.requests[first_request:]]
        # opencode sends its title call and its first answer's call at once: which arrives
        # first is a race. A stable sort by the system prompt keeps the rest in order.
        requests.sort(key=lambda request: str((request.get("messages") or [{}])[0]))
        runs.append(
            (cache, requests, [(o.kind, o.tool_name, _without_ids(o.text)) for o in outputs])
        )

    (before, before_requests, before_outputs), (after, after_requests, after_outputs) = runs
    assert (before, after) == (None, b"{}")
    assert len(after_requests) == 3  # the title, the write, the answer to its result
    assert after_requests == before_requests
    assert after_outputs == before_outputs


def _without_ids(value: Any) -> Any:
    """`value` with what differs between any two runs blanked: ids, session and times."""
    if isinstance(value, str):
        return re.sub(r"\b(call|ses|msg|prt)_[A-Za-z0-9]+|\b1[0-9]{12}\b", "<id>", value)
    if isinstance(value, dict):
        return {key: _without_ids(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_ids(item) for item in value]
    return value


async def test_options_disable_tools_and_set_the_system_prompt(
    rig: Rig, upstream: FakeUpstream
) -> None:
    await rig.sandbox.write_files({f"{WORKDIR}/src/app.py": b"def needle():\n    return 1\n"})
    grep = ToolCallReply("grep", json.dumps({"pattern": "needle"}))
    upstream.script(Reply(tool_calls=[grep]), match=has_tools)
    agent = OpencodeAgent(rig.settings)
    prompt = "You are the rollout test agent. Answer in one word."
    context = rig.context("Find needle.", disabled_tools=["bash", "task"], system_prompt=prompt)

    await agent.prepare(rig.sandbox, context)
    outcome = await agent.run(rig.sandbox, context, rig.outputs.append)

    assert outcome.exit_code == 0, outcome.log_tail
    tools = _tool_names(upstream)
    assert "bash" not in tools
    assert "task" not in tools
    assert {"webfetch", "write", "grep"} <= tools
    agent_calls = [r.body for r in upstream.requests if r.body and r.body.get("tools")]
    assert agent_calls[0]["messages"][0]["content"].startswith(prompt)
    # grep runs ripgrep from PATH: nothing is downloaded, so it works with no network.
    tool_results = [m for m in agent_calls[-1]["messages"] if m["role"] == "tool"]
    assert "src/app.py" in tool_results[0]["content"]


async def test_timeout_kills_opencode_and_its_children(rig: Rig, upstream: FakeUpstream) -> None:
    marker = f"sleep {3000 + uuid.uuid4().int % 1000}"
    command = json.dumps({"command": marker, "description": "Wait"})
    upstream.script(Reply(tool_calls=[ToolCallReply("bash", command)]), match=has_tools)
    agent = OpencodeAgent(rig.settings)
    context = rig.context("Wait.", timeout_s=TIMEOUT_S)
    await agent.prepare(rig.sandbox, context)
    sleeping = asyncio.Event()

    async def watch() -> None:
        await until(lambda: running(marker))
        sleeping.set()

    watcher = asyncio.create_task(watch())
    outcome = await agent.run(rig.sandbox, context, rig.outputs.append)
    watcher.cancel()

    assert sleeping.is_set(), "the bash tool never started; the timeout proved nothing"
    assert (outcome.exit_code, outcome.timed_out) == (None, True)
    assert rig.survivors() == []


async def test_cancelling_run_kills_opencode_and_its_children(
    rig: Rig, upstream: FakeUpstream
) -> None:
    marker = f"sleep {4000 + uuid.uuid4().int % 1000}"
    command = json.dumps({"command": marker, "description": "Wait"})
    upstream.script(Reply(tool_calls=[ToolCallReply("bash", command)]), match=has_tools)
    agent = OpencodeAgent(rig.settings)
    context = rig.context("Wait.", timeout_s=300.0)
    await agent.prepare(rig.sandbox, context)

    run = asyncio.create_task(agent.run(rig.sandbox, context, rig.outputs.append))
    await until(lambda: running(marker))
    assert rig.survivors()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run

    assert rig.survivors() == []


async def test_bad_options_name_the_field(rig: Rig) -> None:
    agent = OpencodeAgent(rig.settings)
    context = rig.context("x", disabled_tools="bash", colour="blue")

    with pytest.raises(AgentError) as raised:
        await agent.prepare(rig.sandbox, context)

    assert "spec.agent.options.disabled_tools" in str(raised.value)
    assert "spec.agent.options.colour" in str(raised.value)


async def test_an_opencode_on_path_at_the_pinned_version_is_used_when_the_cache_is_not_visible(
    rig: Rig,
) -> None:
    # A sandbox that cannot see the host cache (as a remote one) takes opencode from PATH.
    settings = rig.settings.model_copy(update={"cache_dir": rig.settings.state_dir / "unseen"})
    fake = f"#!/bin/sh\necho {settings.opencode_version}\n".encode()
    await rig.sandbox.write_files({"/home/user/bin/opencode": fake})
    await rig.sandbox.exec("chmod +x /home/user/bin/opencode", timeout_s=30)
    context = dataclasses.replace(
        rig.context("x"), env={"PATH": f"/home/user/bin:{os.environ['PATH']}"}
    )

    await OpencodeAgent(settings).prepare(rig.sandbox, context)

    launcher = await rig.sandbox.read_file(LAUNCHER, max_bytes=4096)
    assert launcher is not None
    assert b"exec /home/user/bin/opencode run" in launcher


async def test_a_remote_style_sandbox_installs_the_pinned_version_with_npm(
    settings: Settings, backend: LocalBackend
) -> None:
    # No host cache in view and no opencode on PATH: npm installs it inside the sandbox.
    settings = settings.model_copy(update={"opencode_version": "0.0.2-test"})
    settings = settings.model_copy(update={"cache_dir": settings.state_dir / "unseen"})
    request = SandboxRequest("oc-npm", SandboxSpec(network=NetworkPolicy.FULL), lifetime_s=300)
    sandbox = await backend.create(request)
    try:
        # A FULL sandbox reaches the internet, never the host: the registry is on a test host.
        with public_host() as host:
            async with FakeNpmRegistry(host.listen()) as registry:
                registry.publish_opencode("0.0.2-test")
                env = {"npm_config_registry": registry.url, "npm_config_cache": "/tmp/npm-cache"}
                context = AgentContext("oc-npm", "x", "", {}, 60.0, env=env)

                await OpencodeAgent(settings).prepare(sandbox, context)

        launcher = await sandbox.read_file(LAUNCHER, max_bytes=4096)
        assert launcher is not None
        binary = (
            f"/home/user/.opencode-npm/node_modules/opencode-linux-{host_npm_arch()}/bin/opencode"
        )
        assert f"exec {binary} run".encode() in launcher
        assert registry.hits["/opencode-ai"] >= 1
    finally:
        await sandbox.kill()
