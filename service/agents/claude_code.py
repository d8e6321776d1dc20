"""The `claude-code` harness: Anthropic's Claude Code CLI, headless, against the rollout's model.

The npm package `@anthropic-ai/claude-code` is a placeholder whose postinstall copies the
native binary out of a per-platform optional dependency (`...-linux-x64`, `-musl`, ...);
that dependency comes from the npm registry like any package, so `--ignore-scripts` and
calling the platform binary directly installs it from the registry alone.

It speaks Anthropic's Messages API (`POST <ANTHROPIC_BASE_URL>/v1/messages`), sending the
access's route key as `x-api-key` (the capture proxy holds the real one). Run as
`claude -p --input-format stream-json --output-format stream-json --verbose`, the launcher
turning the instruction file into the one user message it reads on stdin (until EOF: a
plain-text stdin it gives up on after 3 s without data, so it could not be started ahead).
That makes it a streaming session rather than a single-shot one: the one difference the
model sees (2.1.330) is its Bash tool's description, background commands stopped after
1800000 ms by default rather than 600000 (a limit the agent timeout bounds anyway). What it
would do unless told otherwise, and how each is turned off here:

- autoupdate, telemetry, error reporting, `/bug`, release notes and other non-essential
  traffic: `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`, `DISABLE_AUTOUPDATER=1`,
  `DISABLE_TELEMETRY=1`, `DISABLE_ERROR_REPORTING=1`, `DISABLE_BUG_COMMAND=1`;
- flavour-text model calls: `DISABLE_NON_ESSENTIAL_MODEL_CALLS=1`; its small-model calls
  go to the access's auxiliary alias (`ANTHROPIC_DEFAULT_HAIKU_MODEL`), marked not
  trainable by the proxy;
- IDE extension install: `CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL=1`;
- reading the user's `~/.claude`: a private `CLAUDE_CONFIG_DIR`;
- asking before acting: `--dangerously-skip-permissions` (with `IS_SANDBOX=1`, which it
  wants when the sandbox user is root);
- web tools (nothing to reach offline): `--disallowedTools WebFetch,WebSearch` unless
  `options.disallowed_tools` says otherwise.

Observed with 2.1.330 against a recording endpoint and an HTTPS proxy that logs every
CONNECT: a run makes `POST /v1/messages?beta=true` calls and no other connection.

Started ahead (`warm_start`, `CLAUDE_WARM`): it registers its session in its config
directory (`sessions/<pid>.json`) and its plugin store, then waits for its message. What it
reads before that, and for a while after, the task's setup could change: in its workdir and
every directory above, `CLAUDE.md`, `CLAUDE.local.md`, `AGENTS.md`, `.claude`, `.mcp.json`
and `.git` (strace of 2.1.330), and `~/.claude`; it is started ahead only where none of them
is, and handed its message only if none is there at the hand-over. A killed claude leaves
its config directory and `/tmp/claude-<uid>`, `/tmp/cc-socks`: `cleanup` removes them.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from service.agents.base import AgentContext, EmitOutput
from service.agents.harness import EventStream, HarnessAgent
from service.agents.json_lines import JsonLineStream, LineLimits, as_text, clip
from service.agents.packages import NpmPackage
from service.agents.warm_start import WarmStart
from service.config import Settings
from service.errors import FieldViolation
from service.models import AgentOutput, AgentOutputKind, ModelAccess
from service.sandboxes import HOME

__all__ = ["CLAUDE_WARM", "ClaudeCodeAgent", "ClaudeCodeHarness", "claude_env", "translate_event"]

VERSION = "2.1.330"
ROOT = f"{HOME}/.claude-rollout"
"""claude-code's private config directory and files inside the sandbox."""
INSTRUCTION_FILE = f"{ROOT}/instruction.md"
LAUNCHER = f"{ROOT}/run.sh"
DEFAULT_DISALLOWED_TOOLS = ("WebFetch", "WebSearch")
_FIELD = "spec.agent.options"
_NO_PROJECT = """d=$PWD
while :; do
  for m in CLAUDE.md CLAUDE.local.md AGENTS.md .claude .mcp.json .git; do
    if [ -e "$d/$m" ] || [ -L "$d/$m" ]; then exit 3; fi
  done
  [ -n "$d" ] || break
  d=${d%/*}
done
if [ -e "$HOME/.claude" ] || [ -L "$HOME/.claude" ]; then exit 3; fi
"""
"""Exits 3 if what claude reads of its workdir (and above) and ~ at its start is there."""
CLAUDE_WARM = WarmStart(
    instruction_file=INSTRUCTION_FILE,
    go_file=f"{ROOT}/.warm-go",
    settle_test=(
        f'[ -n "$(ls -A {ROOT}/sessions 2>/dev/null)" ] && '
        f'[ -n "$(ls -A {ROOT}/plugins/store 2>/dev/null)" ]'
    ),
    cleanup=f'rm -rf -- {ROOT} "/tmp/claude-$(id -u)" /tmp/cc-socks',
    unchanged=_NO_PROJECT,
)
"""claude-code started ahead: once it has registered its session and plugins (see above)."""
_TO_MESSAGE = r"""t=$(cat; printf x); t=${t%x}
b='\'; q='"'
t=${t//"$b"/"$b$b"}; t=${t//"$q"/"$b$q"}
for i in {1..31}; do
  printf -v c "\\x$(printf %02x "$i")"; printf -v u '\\u%04x' "$i"; t=${t//"$c"/"$u"}
done
printf '{"type":"user","message":{"role":"user","content":"%s"}}\n' "$t"
"""
"""Bash: stdin (the instruction, verbatim) as one stream-json user message line."""


def claude_package(version: str = VERSION) -> NpmPackage:
    """@anthropic-ai/claude-code@version and where its platform binaries are."""
    binaries = tuple(
        f"@anthropic-ai/claude-code-linux-$arch{suffix}/claude" for suffix in ("", "-musl")
    )
    return NpmPackage(
        name="@anthropic-ai/claude-code",
        version=version,
        slug="claude-code",
        command="claude",
        binaries=binaries,
        version_output=f"{version} (Claude Code)",
    )


def option_violations(options: Mapping[str, Any]) -> list[FieldViolation]:
    """Unknown options, and a `disallowed_tools` that is not a list of tool names."""
    violations = [
        FieldViolation(f"{_FIELD}.{name}", "unknown claude-code option (known: disallowed_tools)")
        for name in options
        if name != "disallowed_tools"
    ]
    tools = options.get("disallowed_tools", list(DEFAULT_DISALLOWED_TOOLS))
    if not isinstance(tools, list | tuple) or not all(isinstance(t, str) and t for t in tools):
        violations.append(
            FieldViolation(f"{_FIELD}.disallowed_tools", "must be a list of tool names")
        )
    return violations


def anthropic_base_url(model: ModelAccess) -> str:
    """The access's base URL without its `/v1`: the Anthropic SDK adds `/v1/messages`."""
    return model.base_url.removesuffix("/").removesuffix("/v1")


def claude_env(model: ModelAccess) -> dict[str, str]:
    """Environment for `claude -p` (holds the agent's model token: never log it)."""
    return {
        "ANTHROPIC_BASE_URL": anthropic_base_url(model),
        "ANTHROPIC_API_KEY": model.api_key,
        "ANTHROPIC_MODEL": model.model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model.model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model.model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model.small_model,
        "ANTHROPIC_SMALL_FAST_MODEL": model.small_model,
        "CLAUDE_CONFIG_DIR": ROOT,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
        "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
        "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL": "1",
        "IS_SANDBOX": "1",
    }


def launcher_script(binary: str, disallowed_tools: list[str] | tuple[str, ...]) -> bytes:
    """`run.sh`: claude in the workdir, the instruction as a stream-json user message on
    stdin, JSON events on stdout. The instruction file is opened before claude starts (so,
    started ahead, the FIFO it is has been opened once claude runs), and read to its end
    before the message is written."""
    argv = [binary, "-p", "--input-format", "stream-json", "--output-format", "stream-json"]
    argv += ["--verbose", "--dangerously-skip-permissions"]
    if disallowed_tools:
        argv += ["--disallowedTools", ",".join(disallowed_tools)]
    command = " ".join(shlex.quote(part) for part in argv)
    return (
        f"exec < {shlex.quote(INSTRUCTION_FILE)}\nexec {command} < <(\n{_TO_MESSAGE})\n"
    ).encode()


def _content_outputs(role: str, content: Any) -> list[AgentOutput]:
    outputs = []
    for block in content if isinstance(content, list) else []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind in ("text", "thinking") and role == "assistant":
            text = str(block.get(kind, ""))
            if text.strip():
                outputs.append(AgentOutput(kind=AgentOutputKind.TEXT, text=clip(text)))
        elif kind == "tool_use":
            text = clip(as_text(block.get("input", {})))
            name = str(block.get("name", ""))
            outputs.append(AgentOutput(kind=AgentOutputKind.TOOL_CALL, tool_name=name, text=text))
        elif kind == "tool_result":
            text = clip(as_text(block.get("content", "")))
            error = bool(block.get("is_error"))
            kind_out = AgentOutputKind.ERROR if error else AgentOutputKind.STDOUT
            outputs.append(AgentOutput(kind=kind_out, text=text))
    return outputs


def translate_event(event: dict[str, Any]) -> list[AgentOutput]:
    """The live outputs of one `stream-json` line: the model's text and tool calls, tool
    results, and the final result; `system` bookkeeping is not published."""
    kind = event.get("type")
    if kind == "system":
        return []
    if kind in ("assistant", "user") and isinstance(event.get("message"), dict):
        return _content_outputs(str(kind), event["message"].get("content"))
    if kind == "result":
        error = bool(event.get("is_error")) or event.get("subtype") != "success"
        text = clip(str(event.get("result") or event.get("subtype", "")))
        return [
            AgentOutput(kind=AgentOutputKind.ERROR if error else AgentOutputKind.TEXT, text=text)
        ]
    return [AgentOutput(kind=AgentOutputKind.STDOUT, text=clip(json.dumps(event)))]


class ClaudeCodeHarness:
    """@anthropic-ai/claude-code, pinned."""

    name = "claude-code"
    install_typical = "10-60s"
    home = ROOT
    launcher = LAUNCHER
    warm = CLAUDE_WARM
    package = claude_package()

    def option_violations(self, options: Mapping[str, Any]) -> list[FieldViolation]:
        return option_violations(options)

    def files(self, entry: str, context: AgentContext) -> dict[str, bytes]:
        tools = context.options.get("disallowed_tools", DEFAULT_DISALLOWED_TOOLS)
        return {
            INSTRUCTION_FILE: context.instruction.encode(),
            LAUNCHER: launcher_script(entry, tools),
        }

    def env(self, model: ModelAccess, options: Mapping[str, Any]) -> dict[str, str]:
        return claude_env(model)

    def events(self, emit: EmitOutput) -> EventStream:
        return JsonLineStream(emit, translate_event, agent=self.name, limits=LineLimits())


class ClaudeCodeAgent(HarnessAgent):
    """Runs claude-code (pinned) on the task's instruction."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, ClaudeCodeHarness())
