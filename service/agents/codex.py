"""The `codex` harness: OpenAI's Codex CLI, headless, against the rollout's model.

The npm package `@openai/codex` is a JS shim whose optional dependencies are aliases of
per-platform builds of itself (`@openai/codex-linux-x64` ->
`@openai/codex@<version>-linux-x64`), each holding a static musl binary under
`vendor/<triple>/bin/codex`: from the npm registry alone, and nothing of the host needed.

Current codex speaks only the Responses API: the access is a custom model provider with
`wire_api = "responses"` (`POST <base_url>/responses`), its key read from
`ROLLOUT_MODEL_KEY` (the route's key; the capture proxy holds the real one). Run as
`codex exec --json` with the instruction on stdin; what it would do unless told
otherwise, and how each is turned off here (`config.toml` in a private `CODEX_HOME`,
checked with `--strict-config`):

- update checks: `check_for_update_on_startup = false`;
- analytics, feedback upload, OpenTelemetry export: `analytics.enabled = false`,
  `feedback.enabled = false`, `otel.exporter = "none"`;
- the user's config and history: a private `CODEX_HOME`, `history.persistence = "none"`;
- web search (nothing to reach offline): `web_search = "disabled"`;
- asking before acting, and its own sandbox (bubblewrap/landlock, which cannot nest in
  ours): `approval_policy = "never"`, `sandbox_mode = "danger-full-access"`;
- retrying a failed call on its own: `request_max_retries = 0`, `stream_max_retries = 0`
  (every call is a turn; the trainer sees failures as they are);
- a shell snapshot: at its start codex captures a login shell's environment in the
  background and, once that is written, runs commands as `bash -c` sourcing it instead of
  `bash -lc`. Which one a command gets depends on how soon it comes (a warm codex's almost
  always has the snapshot, a cold one's under load may not), so the same policy would see
  different tool calls run: `features.shell_snapshot = false`, every command `bash -lc`.

Observed with 0.169.0 against a recording endpoint and an HTTPS proxy that logs every
CONNECT: a run makes `POST /v1/responses` calls and no other connection.

Started ahead (`warm_start`, `CODEX_WARM`): `exec -` reads its stdin to EOF, so the seam's
FIFO holds it; before it reads it, it opens its SQLite databases in CODEX_HOME (the last of
its start, by strace of 0.169.0: settled once their WAL files are there) and reads what the
task's setup could change: `.git` in its workdir and every directory above, the workdir's
`.codex`, and `/etc/codex`. It is started ahead only where none of them is, and handed its
instruction only if none is there at the hand-over. (`AGENTS.md` it reads after its prompt:
a warm codex sees one made by setup.) A killed codex leaves only CODEX_HOME: `cleanup`
removes it.
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
from service.errors import AgentError, FieldViolation
from service.models import AgentOutput, AgentOutputKind, ModelAccess
from service.sandboxes import HOME

__all__ = ["CODEX_WARM", "CodexAgent", "CodexHarness", "config_toml", "translate_event"]

VERSION = "0.169.0"
CODEX_HOME = f"{HOME}/.codex-rollout"
"""codex's private home (config, sessions, skills) inside the sandbox."""
CONFIG_FILE = f"{CODEX_HOME}/config.toml"
INSTRUCTION_FILE = f"{CODEX_HOME}/instruction.md"
LAUNCHER = f"{CODEX_HOME}/run.sh"
PROVIDER_ID = "rollout"
KEY_VARIABLE = "ROLLOUT_MODEL_KEY"
_QUIET = frozenset({"thread.started", "turn.started", "turn.completed"})
_QUIET_ITEMS = frozenset({"todo_list"})


_NO_PROJECT = """d=$PWD
while :; do
  for m in .git .codex; do
    if [ -e "$d/$m" ] || [ -L "$d/$m" ]; then exit 3; fi
  done
  [ -n "$d" ] || break
  d=${d%/*}
done
if [ -e /etc/codex ] || [ -L /etc/codex ]; then exit 3; fi
"""
"""Exits 3 if what codex reads of its workdir (and above) and /etc at its start is there."""
_DATABASES = ("goals_1", "logs_2", "memories_1", "queue_1", "state_5")
"""The SQLite databases 0.169.0 opens in CODEX_HOME, last, before it reads its stdin."""
CODEX_WARM = WarmStart(
    instruction_file=INSTRUCTION_FILE,
    go_file=f"{CODEX_HOME}/.warm-go",
    settle_test=" && ".join(f"[ -e {CODEX_HOME}/{db}.sqlite-wal ]" for db in _DATABASES),
    cleanup=f"rm -rf -- {CODEX_HOME}",
    unchanged=_NO_PROJECT,
)
"""codex started ahead: once it has opened its databases (see above)."""


def codex_package(version: str = VERSION) -> NpmPackage:
    """@openai/codex@version and where its platform binary is."""
    binary = "@openai/codex-linux-$arch/vendor/$machine-unknown-linux-musl/bin/codex"
    return NpmPackage(
        name="@openai/codex",
        version=version,
        slug="codex",
        command="codex",
        binaries=(binary,),
        version_output=f"codex-cli {version}",
    )


def _toml(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value)


def config_toml(model: ModelAccess) -> str:
    """`config.toml`: the access as the only model provider, everything else offline."""
    return f"""model = {_toml(model.model)}
model_provider = "{PROVIDER_ID}"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
web_search = "disabled"

[model_providers.{PROVIDER_ID}]
name = "{PROVIDER_ID}"
base_url = {_toml(model.base_url)}
env_key = "{KEY_VARIABLE}"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[history]
persistence = "none"

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"

[features]
shell_snapshot = false
"""


def launcher_script(binary: str) -> bytes:
    """`run.sh`: codex exec where it is started (the task's workdir: no `-C`), the
    instruction on stdin, JSONL on stdout."""
    argv = [binary, "exec", "--json", "--skip-git-repo-check", "--strict-config"]
    command = " ".join(shlex.quote(part) for part in argv)
    return f"exec {command} - < {shlex.quote(INSTRUCTION_FILE)}\n".encode()


def _item(item: dict[str, Any]) -> list[AgentOutput]:
    kind = item.get("type")
    if kind in _QUIET_ITEMS:
        return []
    if kind in ("agent_message", "reasoning"):
        text = str(item.get("text", ""))
        return [AgentOutput(kind=AgentOutputKind.TEXT, text=clip(text))] if text.strip() else []
    if kind == "command_execution":
        text = str(item.get("command", ""))
        if item.get("status") == "failed" or item.get("exit_code") not in (0, None):
            text = f"{text}\nexit {item.get('exit_code')}"
        return [AgentOutput(kind=AgentOutputKind.TOOL_CALL, tool_name="shell", text=clip(text))]
    if kind == "file_change":
        text = clip(as_text(item.get("changes", [])))
        return [AgentOutput(kind=AgentOutputKind.TOOL_CALL, tool_name="apply_patch", text=text)]
    if kind == "error":
        return [AgentOutput(kind=AgentOutputKind.ERROR, text=clip(str(item.get("message", ""))))]
    name = str(item.get("tool") or kind or "")
    return [AgentOutput(kind=AgentOutputKind.TOOL_CALL, tool_name=name, text=clip(as_text(item)))]


def translate_event(event: dict[str, Any]) -> list[AgentOutput]:
    """The live outputs of one `exec --json` line: finished items (messages, commands, file
    changes, other tools) and errors; thread and turn bookkeeping is not published."""
    kind = event.get("type")
    if kind in _QUIET or kind in ("item.started", "item.updated"):
        return []
    if kind == "item.completed" and isinstance(event.get("item"), dict):
        return _item(event["item"])
    if kind == "error":
        return [AgentOutput(kind=AgentOutputKind.ERROR, text=clip(str(event.get("message", ""))))]
    if kind == "turn.failed":
        error = event.get("error")
        message = error.get("message", "") if isinstance(error, dict) else error
        return [AgentOutput(kind=AgentOutputKind.ERROR, text=clip(str(message)))]
    return [AgentOutput(kind=AgentOutputKind.STDOUT, text=clip(json.dumps(event)))]


class CodexHarness:
    """@openai/codex, pinned."""

    name = "codex"
    install_typical = "10-60s"
    home = CODEX_HOME
    launcher = LAUNCHER
    warm = CODEX_WARM
    package = codex_package()

    def option_violations(self, options: Mapping[str, Any]) -> list[FieldViolation]:
        return [
            FieldViolation(f"spec.agent.options.{name}", "the codex agent takes no options")
            for name in options
        ]

    def files(self, entry: str, context: AgentContext) -> dict[str, bytes]:
        if context.model is None:
            raise AgentError("the codex agent needs an LLM endpoint (spec.endpoint)")
        return {
            CONFIG_FILE: config_toml(context.model).encode(),
            INSTRUCTION_FILE: context.instruction.encode(),
            LAUNCHER: launcher_script(entry),
        }

    def env(self, model: ModelAccess, options: Mapping[str, Any]) -> dict[str, str]:
        return {"CODEX_HOME": CODEX_HOME, KEY_VARIABLE: model.api_key}

    def events(self, emit: EmitOutput) -> EventStream:
        return JsonLineStream(emit, translate_event, agent=self.name, limits=LineLimits())


class CodexAgent(HarnessAgent):
    """Runs codex (pinned) on the task's instruction."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, CodexHarness())
