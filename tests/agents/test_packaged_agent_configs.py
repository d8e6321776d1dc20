"""What each packaged agent is handed (config, environment, launcher, options) and how its
output lines become live events: lines shaped as the pinned versions print them."""

from __future__ import annotations

import json
import shlex
import subprocess
import tomllib
from collections.abc import Callable, Sequence

from service.agents import claude_code, codex, mini_swe_agent
from service.agents.base import AgentContext, EmitOutput
from service.agents.claude_code import ClaudeCodeHarness, claude_env
from service.agents.codex import CodexHarness, config_toml
from service.agents.harness import EventStream
from service.agents.mini_swe_agent import MiniSweHarness, config_document
from service.agents.mini_swe_agent_lock import REQUIREMENTS
from service.models import AgentOutput, AgentOutputKind
from service.models.model_access import ModelAccess

ACCESS = ModelAccess(
    base_url="http://127.0.0.1:48080/v1",
    api_key="sandbox-route",
    model="rollout-policy",
    small_model="rollout-policy-aux",
)


def test_claude_code_reaches_the_route_as_anthropic_with_both_aliases_and_offline() -> None:
    env = claude_env(ACCESS)

    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:48080"  # the SDK adds /v1/messages
    assert env["ANTHROPIC_API_KEY"] == "sandbox-route"
    assert env["ANTHROPIC_MODEL"] == env["ANTHROPIC_DEFAULT_SONNET_MODEL"] == "rollout-policy"
    assert env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "rollout-policy-aux"
    for flag in (
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "DISABLE_AUTOUPDATER",
        "DISABLE_TELEMETRY",
        "DISABLE_ERROR_REPORTING",
        "DISABLE_NON_ESSENTIAL_MODEL_CALLS",
    ):
        assert env[flag] == "1"
    assert env["CLAUDE_CONFIG_DIR"].startswith("/home/user/")


def test_claude_code_runs_headless_on_the_instruction_file() -> None:
    harness = ClaudeCodeHarness()
    instruction = 'Fix it; don\'t `rm` $HOME "\\".\n\t\n'
    context = _context(instruction, disallowed_tools=["WebFetch", "Task"])

    files = harness.files("/cache/claude code/claude", context)

    assert files[claude_code.INSTRUCTION_FILE] == context.instruction.encode()
    opens, launch, convert = files[claude_code.LAUNCHER].decode().split("\n", 2)
    assert shlex.split(opens) == ["exec", "<", claude_code.INSTRUCTION_FILE]
    assert shlex.split(launch) == [
        "exec",
        "/cache/claude code/claude",
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
        "--disallowedTools",
        "WebFetch,Task",
        "<",
        "<(",
    ]
    message = subprocess.run(
        ["bash", "-c", convert.removesuffix(")\n")],
        input=context.instruction.encode(),
        capture_output=True,
        check=True,
    ).stdout.decode()
    assert message.endswith("\n")
    assert json.loads(message) == {
        "type": "user",
        "message": {"role": "user", "content": context.instruction},
    }
    assert harness.option_violations({"disallowed_tools": "Bash", "x": 1}) != []
    assert [v.field for v in harness.option_violations({"x": 1})] == ["spec.agent.options.x"]


def test_claude_code_stream_json_becomes_text_tool_calls_results_and_the_end() -> None:
    lines = [
        {"type": "system", "subtype": "init", "tools": ["Bash"]},
        {
            "type": "assistant",
            "message": {
                "content": [
                    {"type": "text", "text": "Writing it."},
                    {"type": "tool_use", "name": "Write", "input": {"file_path": "/w/a"}},
                ]
            },
        },
        {
            "type": "user",
            "message": {"content": [{"type": "tool_result", "content": "ok", "is_error": False}]},
        },
        {"type": "result", "subtype": "success", "is_error": False, "result": "Done."},
        {"type": "result", "subtype": "success", "is_error": True, "result": "API Error: 400"},
    ]

    outputs = _feed(ClaudeCodeHarness().events, lines)

    assert [(o.kind, o.tool_name, o.text) for o in outputs] == [
        (AgentOutputKind.TEXT, "", "Writing it."),
        (AgentOutputKind.TOOL_CALL, "Write", '{"file_path": "/w/a"}'),
        (AgentOutputKind.STDOUT, "", "ok"),
        (AgentOutputKind.TEXT, "", "Done."),
        (AgentOutputKind.ERROR, "", "API Error: 400"),
    ]


def test_codex_has_the_route_as_its_only_responses_provider_and_is_offline() -> None:
    config = tomllib.loads(config_toml(ACCESS))

    assert config["model"] == "rollout-policy"
    assert config["model_provider"] == "rollout"
    provider = config["model_providers"]["rollout"]
    assert provider["base_url"] == ACCESS.base_url
    assert provider["wire_api"] == "responses"
    assert provider["env_key"] == codex.KEY_VARIABLE
    assert "sandbox-route" not in config_toml(ACCESS)  # the key is in the environment only
    assert config["check_for_update_on_startup"] is False
    assert config["web_search"] == "disabled"
    assert config["analytics"] == {"enabled": False}
    assert config["feedback"] == {"enabled": False}
    assert config["otel"] == {"exporter": "none"}
    assert config["history"] == {"persistence": "none"}
    assert config["features"] == {"shell_snapshot": False}
    assert (config["approval_policy"], config["sandbox_mode"]) == ("never", "danger-full-access")
    env = CodexHarness().env(ACCESS, {})
    assert env == {"CODEX_HOME": codex.CODEX_HOME, codex.KEY_VARIABLE: "sandbox-route"}


def test_a_hostile_model_name_cannot_add_codex_config() -> None:
    access = ModelAccess(
        base_url=ACCESS.base_url,
        api_key="k",
        model='m"\n[otel]\nexporter = "otlp',
        small_model="aux",
    )

    config = tomllib.loads(config_toml(access))

    assert config["model"] == access.model
    assert config["otel"] == {"exporter": "none"}


def test_codex_runs_exec_json_on_the_instruction_from_stdin() -> None:
    files = CodexHarness().files("/c/codex", _context("Do it."))

    argv = shlex.split(files[codex.LAUNCHER].decode())
    assert argv == [
        "exec",
        "/c/codex",
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--strict-config",
        "-",
        "<",
        codex.INSTRUCTION_FILE,
    ]
    assert files[codex.INSTRUCTION_FILE] == b"Do it."


def test_codex_jsonl_becomes_text_commands_and_errors() -> None:
    lines = [
        {"type": "thread.started", "thread_id": "t"},
        {"type": "turn.started"},
        {"type": "item.started", "item": {"type": "command_execution", "command": "ls"}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "Listing."}},
        {
            "type": "item.completed",
            "item": {"type": "command_execution", "command": "false", "exit_code": 1},
        },
        {"type": "item.completed", "item": {"type": "file_change", "changes": [{"path": "a"}]}},
        {"type": "turn.failed", "error": {"message": "stream disconnected"}},
    ]

    outputs = _feed(CodexHarness().events, lines)

    assert [(o.kind, o.tool_name, o.text) for o in outputs] == [
        (AgentOutputKind.TEXT, "", "Listing."),
        (AgentOutputKind.TOOL_CALL, "shell", "false\nexit 1"),
        (AgentOutputKind.TOOL_CALL, "apply_patch", '[{"path": "a"}]'),
        (AgentOutputKind.ERROR, "", "stream disconnected"),
    ]


def test_mini_swe_agent_is_pointed_at_the_route_by_its_environment_only() -> None:
    env = MiniSweHarness().env(ACCESS, {})

    assert env["MSWEA_MODEL_NAME"] == "openai/rollout-policy"
    assert (env["OPENAI_BASE_URL"], env["OPENAI_API_KEY"]) == (ACCESS.base_url, "sandbox-route")
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert env["HF_HUB_OFFLINE"] == "1"
    config = config_document({"step_limit": 7})
    assert config["agent"] == {"step_limit": 7, "cost_limit": 0}
    assert "cwd" not in config["environment"]  # where it is started: the task's workdir
    assert "sandbox-route" not in json.dumps(config)


def test_mini_swe_agents_install_is_the_pinned_closure() -> None:
    package = MiniSweHarness().package

    assert f"mini-swe-agent=={mini_swe_agent.VERSION}" in REQUIREMENTS
    assert all(r.count("==") == 1 for r in REQUIREMENTS)
    script = package.install_script("/cache/mini-swe-agent/x")
    assert "--no-deps" in script
    assert "--only-binary :all:" in script
    assert package.install_id.startswith(f"{mini_swe_agent.VERSION}-")


def _context(instruction: str, **options: object) -> AgentContext:
    return AgentContext("r", instruction, "", options, 60.0, model=ACCESS)


def _feed(
    events: Callable[[EmitOutput], EventStream], lines: Sequence[object]
) -> list[AgentOutput]:
    outputs: list[AgentOutput] = []
    stream = events(outputs.append)
    stream.feed(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    stream.close()
    return outputs
