"""The mini-swe-agent harness: the real pinned mini-swe-agent in a real bwrap sandbox, talking
through the real capture proxy to a scripted upstream on loopback (chat completions)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from service.agents.cached_install import CachedInstall
from service.agents.mini_swe_agent import MiniSweAgent, MiniSweHarness
from service.errors import AgentError, AgentInstallError
from service.models import AgentOutputKind, ErrorKind
from service.sandboxes.base import WORKDIR
from service.sandboxes.local.backend import LocalBackend
from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from tests.agents.conftest import UPSTREAM_KEY, Rig

pytestmark = [pytest.mark.agents, pytest.mark.timeout(900)]

CONTENT = "hello from mini"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def bash(command: str) -> Reply:
    return Reply(
        text="Running it.", tool_calls=[ToolCallReply("bash", json.dumps({"command": command}))]
    )


async def test_a_bash_tool_call_writes_a_file_and_the_agent_submits(
    rig: Rig, upstream: FakeUpstream
) -> None:
    upstream.script(bash(f"printf '%s\\n' '{CONTENT}' > hello.txt"), bash(SUBMIT), match=has_tools)
    agent = MiniSweAgent(rig.settings)
    await agent.provision(LocalBackend.capabilities, lambda line: None)
    context = rig.context('Create hello.txt. Say "it\'s done" when `done`; $HOME stays as is.')

    await agent.prepare(rig.sandbox, context)
    outcome = await agent.run(rig.sandbox, context, rig.outputs.append)

    assert (outcome.exit_code, outcome.timed_out) == (0, False), outcome.log_tail
    written = await rig.sandbox.read_file(f"{WORKDIR}/hello.txt", max_bytes=1024)
    assert written == f"{CONTENT}\n".encode()
    tool_calls = [o for o in rig.outputs if o.kind is AgentOutputKind.TOOL_CALL]
    assert [(o.tool_name, o.text) for o in tool_calls][1] == ("bash", SUBMIT)
    assert CONTENT in tool_calls[0].text
    assert any(o.kind is AgentOutputKind.TEXT and o.text == "Running it." for o in rig.outputs)
    assert rig.outputs[-1].kind is AgentOutputKind.TEXT
    assert rig.outputs[-1].text.startswith("Submitted")
    # The instruction reaches the model verbatim inside mini's own task template.
    first = upstream.requests[0].body or {}
    user = next(m for m in first["messages"] if m["role"] == "user")
    assert f"Please solve this issue: {context.instruction}\n" in user["content"]
    assert [t["function"]["name"] for t in first["tools"]] == ["bash"]
    # Two chat-completions turns through the proxy, both trainable, the key the proxy's alone.
    assert len(rig.turns) == 2
    assert all(t.trainable and t.upstream_status == 200 for t in rig.turns)
    assert all(r.path == "/v1/chat/completions" for r in upstream.requests)
    assert all(r.headers["authorization"] == f"Bearer {UPSTREAM_KEY}" for r in upstream.requests)
    assert not any(UPSTREAM_KEY in o.text for o in rig.outputs)


async def test_options_set_limits_and_bad_ones_name_the_field(
    rig: Rig, upstream: FakeUpstream
) -> None:
    upstream.script(bash("true"), bash("true"), bash("true"), match=has_tools)
    agent = MiniSweAgent(rig.settings)
    with pytest.raises(AgentError) as raised:
        await agent.prepare(rig.sandbox, rig.context("x", step_limit=-1, colour="blue"))
    assert "spec.agent.options.step_limit" in str(raised.value)
    assert "spec.agent.options.colour" in str(raised.value)

    context = rig.context("Loop.", step_limit=2)
    await agent.prepare(rig.sandbox, context)
    outcome = await agent.run(rig.sandbox, context, rig.outputs.append)

    # Two model calls, then mini stops on its step limit: not a submission, so exit 1.
    assert outcome.exit_code == 1, outcome.log_tail
    assert len(rig.turns) == 2
    assert rig.outputs[-1].kind is AgentOutputKind.ERROR
    assert rig.outputs[-1].text.startswith("LimitsExceeded")


async def test_a_pypi_install_that_fails_is_agent_install_with_pips_message(
    tmp_path: Path,
) -> None:
    package = dataclasses.replace(
        MiniSweHarness().package, requirements=("mini-swe-agent==0.0.0.999",)
    )
    install = CachedInstall(tmp_path / "cache", package)

    with pytest.raises(AgentInstallError) as raised:
        await install.ensure()

    assert raised.value.kind is ErrorKind.AGENT_INSTALL
    assert "installing mini-swe-agent@2.4.6 failed" in str(raised.value)
    assert "ERROR: " in str(raised.value)
    assert install.installed_binary() is None
