"""The seed's opencode_env through the real front door and server, driven by openenv's own
clients: MCPToolClient over HTTP /mcp, GenericEnvClient over the WebSocket, plain HTTP for the
info routes. The command agent plays the agent; opencode runs against the scripted upstream."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient

from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools

pytestmark = pytest.mark.e2e

SEED_FIELDS = {
    "task_id",
    "sandbox_id",
    "reward",
    "agent_exit_code",
    "wall_s",
    "mode",
    "setup_results",
    "verify_results",
    "proxy_turns",
    "files",
    "files_extra",
    "agent_log_tail",
    "proxy_log_tail",
    "error",
}
COPY = {
    "instruction": "copy a.txt to b.txt",
    "setup": ["echo hi > a.txt"],
    "verify": ["grep -q hi b.txt"],
    "agent": "command",
    "agent_command": "cp a.txt b.txt",
}


async def run_rollout(url: str, **arguments: Any) -> dict[str, Any]:
    async with MCPToolClient(base_url=f"{url}/opencode_env", message_timeout_s=300) as env:
        raw = await env.call_tool("run_rollout", **arguments)
    assert isinstance(raw, str)
    result: dict[str, Any] = json.loads(raw)
    return result


async def test_run_rollout_over_mcp_returns_the_seeds_result(door_url: str) -> None:
    result = await run_rollout(door_url, task_id="copy-1", **COPY)

    assert set(result) >= SEED_FIELDS
    assert result["reward"] == 1.0
    assert result["error"] is None
    assert result["status"] == "SUCCEEDED"
    assert result["task_id"] == "copy-1"
    assert result["mode"] == "transparent_proxy"
    assert result["agent_exit_code"] == 0
    assert [(r["cmd"], r["exit_code"]) for r in result["setup_results"]] == [("echo hi > a.txt", 0)]
    assert [(r["cmd"], r["exit_code"]) for r in result["verify_results"]] == [
        ("grep -q hi b.txt", 0)
    ]
    assert result["files"]["/home/user/workdir/b.txt"] == "hi\n"
    assert result["sandbox_id"]
    assert result["wall_s"] > 0


async def test_a_failed_verify_scores_zero_and_a_failed_setup_has_no_reward(
    door_url: str,
) -> None:
    wrong = await run_rollout(door_url, **{**COPY, "agent_command": "true"})
    assert (wrong["reward"], wrong["error"]) == (0.0, None)

    broken = await run_rollout(door_url, **{**COPY, "setup": ["exit 3"]})
    assert broken["reward"] is None
    assert broken["status"] == "FAILED"
    assert broken["error_kind"] == "SETUP"
    assert broken["error"].startswith("SETUP: ")
    assert broken["setup_results"][0]["exit_code"] == 3


async def test_a_bad_argument_is_a_tool_error_naming_it(door_url: str) -> None:
    with pytest.raises(RuntimeError, match="mode must be one of"):
        await run_rollout(door_url, **{**COPY, "mode": "sideways"})
    with pytest.raises(RuntimeError, match="instruction is required"):
        await run_rollout(door_url, **{**COPY, "instruction": ""})


async def test_run_rollout_as_a_step_over_the_websocket(door_url: str) -> None:
    async with GenericEnvClient(base_url=f"{door_url}/opencode_env") as env:
        ready = await env.reset()
        assert ready.observation["metadata"]["status"] == "ready"
        step = await env.step({"type": "call_tool", "tool_name": "run_rollout", "arguments": COPY})
        state = await env.state()
    observation = step.observation
    assert observation["error"] is None, observation
    result = json.loads(observation["result"]["data"])
    assert result["reward"] == 1.0
    assert state["rollouts_completed"] == 1
    assert state["last_reward"] == 1.0


async def test_the_info_routes_answer(door_url: str) -> None:
    async with httpx.AsyncClient(base_url=door_url) as http:
        assert (await http.get("/health")).json()["status"] == "healthy"
        assert (await http.get("/opencode_env/health")).json()["status"] == "healthy"
        metadata = (await http.get("/opencode_env/metadata")).json()
        schema = (await http.get("/opencode_env/schema")).json()
        tools = (
            await http.post(
                "/opencode_env/mcp", json={"jsonrpc": "2.0", "method": "tools/list", "id": 1}
            )
        ).json()
    assert metadata["name"] == "OpenCodeEnvironment"
    assert "tool_name" in schema["action"]["properties"]
    assert "rollouts_completed" in schema["state"]["properties"]
    [tool] = tools["result"]["tools"]
    assert tool["name"] == "run_rollout"
    seed_arguments = {
        "endpoint", "base_url", "api_key", "model", "instruction", "setup", "verify",
        "task_id", "mode", "disable_thinking", "max_tokens_cap", "top_logprobs",
        "agent_timeout_s", "template",
    }  # fmt: skip
    assert seed_arguments <= set(tool["inputSchema"]["properties"])


@pytest.mark.opencode
async def test_opencode_turns_carry_token_ids_and_logprobs(door_url: str) -> None:
    key, model = "sk-openenv-upstream-2c7e", "openenv-policy"
    async with FakeUpstream(api_key=key, model=model) as upstream:
        arguments = json.dumps({"filePath": "hello.txt", "content": "hello"})
        upstream.script(Reply(tool_calls=[ToolCallReply("write", arguments)]), match=has_tools)
        result = await run_rollout(
            door_url,
            base_url=upstream.base_url,
            api_key=key,
            model=model,
            instruction="Create hello.txt containing exactly: hello",
            verify=["grep -qx hello hello.txt"],
            agent_timeout_s=240,
        )
    assert result["reward"] == 1.0, result["error"]
    turns = result["proxy_turns"]
    assert len(turns) == len(upstream.sent) >= 2
    for turn in turns:
        assert turn["completion_token_ids"]
        assert len(turn["per_token_logps"]) == len(turn["completion_token_ids"])
    sent = sorted(s.logprobs for s in upstream.sent)
    got = sorted(t["per_token_logps"] for t in turns)
    for got_logprobs, sent_logprobs in zip(got, sent, strict=True):
        assert got_logprobs == pytest.approx(sent_logprobs, abs=1e-6)
    assert key not in json.dumps(result)
