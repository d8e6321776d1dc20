"""The `mini-swe-agent` harness: SWE-agent's mini agent, headless, against the rollout's model.

mini-swe-agent is a Python package: it is installed as wheels into the service's cache
(`PypiPackage`: its whole dependency closure pinned in `mini_swe_agent_lock`, for the
server's CPython minor version) and run by the sandbox's own
`python3.X` of that version, with the install on PYTHONPATH, so a sandbox on a Debian image
needs nothing of the host but the cache (bookworm's python3 is 3.11, as the server's).
`mini_swe_agent_runner.py` is copied into the sandbox and drives mini-swe-agent's
`DefaultAgent` with mini's own prompts and bash tool, printing each message as a JSON line.

The model is litellm's OpenAI-compatible provider (`openai/<model>` at the access's base
URL, from `MSWEA_MODEL_NAME`, `OPENAI_BASE_URL`, `OPENAI_API_KEY`: chat completions, as
the capture proxy speaks today). What it would do unless told
otherwise, and how each is turned off here:

- litellm fetches its model cost map at import: `LITELLM_LOCAL_MODEL_COST_MAP=True`;
- cost tracking fails on a model it does not know: `cost_tracking: ignore_errors` and
  `cost_limit: 0` (no limit; the service's budget is the agent timeout);
- mini prints a banner and reads `~/.config/mini-swe-agent/.env`:
  `MSWEA_SILENT_STARTUP=1`, a private `MSWEA_GLOBAL_CONFIG_DIR`;
- Hugging Face hub calls (tokenizers of some models): `HF_HUB_OFFLINE=1`;
- litellm reads a `.env` from its install's directory or any above it (`/.env`, `~/.env`):
  `LITELLM_MODE=PRODUCTION`.

Started ahead (`warm_start`, `MINI_WARM`): the runner imports mini-swe-agent and litellm and
makes its model, environment and agent, writes `LOADED`, then blocks on its instruction
(stdin). What it read before that the task's setup could change: mini's `.env` in its
config directory (it must not be there, at the start and at the hand-over) and the modules on
`sys.path` outside the read-only install (nothing in their directories changed since
`LOADED`: `find -cnewer`, which `touch` cannot fake). It reads nothing of its workdir.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from service.agents import mini_swe_agent_runner
from service.agents.base import AgentContext, EmitOutput
from service.agents.harness import EventStream, HarnessAgent
from service.agents.json_lines import JsonLineStream, LineLimits, clip
from service.agents.mini_swe_agent_lock import REQUIREMENTS
from service.agents.packages import PypiPackage
from service.agents.warm_start import WarmStart
from service.config import Settings
from service.errors import FieldViolation
from service.models import AgentOutput, AgentOutputKind, ModelAccess
from service.sandboxes import HOME

__all__ = ["MINI_WARM", "MiniSweAgent", "MiniSweHarness", "config_document", "translate_message"]

VERSION = "2.4.6"
ROOT = f"{HOME}/.mini-swe-agent"
"""mini-swe-agent's private files inside the sandbox."""
CONFIG_FILE = f"{ROOT}/config.json"
INSTRUCTION_FILE = f"{ROOT}/instruction.md"
RUNNER_FILE = f"{ROOT}/runner.py"
LAUNCHER = f"{ROOT}/run.sh"
LOADED = f"{ROOT}/loaded"
"""Written by the runner once it has done all it does before reading its instruction."""
_DOTENV = f"{ROOT}/config/.env"
_HANDED_FILES = ".warm-go config config.json instruction.md loaded run.sh runner.py "
"""All that is in its directory at the hand-over (nothing the task's setup put there that
its Python would import from the script's directory)."""
MINI_WARM = WarmStart(
    instruction_file=INSTRUCTION_FILE,
    go_file=f"{ROOT}/.warm-go",
    settle_test=f"[ -e {LOADED} ]",
    cleanup=f"rm -rf -- {ROOT}",
    unchanged=f"if [ -e {_DOTENV} ] || [ -L {_DOTENV} ]; then exit 3; fi",
    handed_unchanged=(
        f'[ "$(LC_ALL=C ls -A {ROOT} | tr "\\n" " ")" = "{_HANDED_FILES}" ] || exit 5\n'
        f'[ -z "$(ls -A {ROOT}/config)" ] || exit 5\n'
        f"if [ -n \"$(tr '\\n' '\\0' < {LOADED} | "
        f'xargs -0 -r sh -c \'find "$@" -cnewer {LOADED} -print -quit\' find)" ]; '
        "then exit 5; fi"
    ),
)
DEFAULT_COMMAND_TIMEOUT_S = 120
_OPTIONS: dict[str, str] = {
    "step_limit": "model calls before it stops (0: no limit)",
    "command_timeout_s": "seconds one bash command may take",
}
_FIELD = "spec.agent.options"


def option_violations(options: Mapping[str, Any]) -> list[FieldViolation]:
    """Unknown options, and known ones that are not non-negative integers."""
    known = ", ".join(sorted(_OPTIONS))
    violations = []
    for name, value in options.items():
        if name not in _OPTIONS:
            description = f"unknown mini-swe-agent option (known: {known})"
            violations.append(FieldViolation(f"{_FIELD}.{name}", description))
        elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
            description = f"must be a non-negative integer: {_OPTIONS[name]}"
            violations.append(FieldViolation(f"{_FIELD}.{name}", description))
    return violations


def config_document(options: Mapping[str, Any]) -> dict[str, Any]:
    """What the runner merges over mini.yaml (options must have passed the checks); the
    model and its access come from the environment (`MiniSweHarness.env`). No `cwd`: its
    commands run where it is started, the task's workdir."""
    timeout_s = options.get("command_timeout_s", DEFAULT_COMMAND_TIMEOUT_S)
    return {
        "model": {"model_class": "litellm", "cost_tracking": "ignore_errors"},
        "agent": {"step_limit": options.get("step_limit", 0), "cost_limit": 0},
        "environment": {"environment_class": "local", "timeout": timeout_s},
    }


def translate_message(event: dict[str, Any]) -> list[AgentOutput]:
    """The live outputs of one message line: the model's text and bash commands, each
    command's observation, and how the run ended (the prompts are not published)."""
    role, content = event.get("role"), clip(str(event.get("content", "")))
    if role == "assistant":
        text = [AgentOutput(kind=AgentOutputKind.TEXT, text=content)] if content.strip() else []
        commands = [
            AgentOutput(kind=AgentOutputKind.TOOL_CALL, tool_name="bash", text=clip(str(c)))
            for c in event.get("actions") or []
        ]
        return text + commands
    if role == "tool":
        return [AgentOutput(kind=AgentOutputKind.STDOUT, text=content)]
    if role == "exit":
        status = str(event.get("exit_status", ""))
        kind = AgentOutputKind.TEXT if status == "Submitted" else AgentOutputKind.ERROR
        return [AgentOutput(kind=kind, text=f"{status}: {content}".rstrip(": "))]
    return []


def _launcher(site: str) -> bytes:
    python = f"python3.{sys.version_info.minor}"
    run = " ".join(shlex.quote(part) for part in (RUNNER_FILE, CONFIG_FILE, LOADED))
    stdin = shlex.quote(INSTRUCTION_FILE)
    return f"export PYTHONPATH={shlex.quote(site)}\nexec {python} -s {run} < {stdin}\n".encode()


class MiniSweHarness:
    """mini-swe-agent, pinned."""

    name = "mini-swe-agent"
    install_typical = "60-150s"
    home = ROOT
    launcher = LAUNCHER
    warm = MINI_WARM

    def __init__(self) -> None:
        self.package = PypiPackage(
            name="mini-swe-agent",
            version=VERSION,
            slug="mini-swe-agent",
            python=f"python3.{sys.version_info.minor}",
            host_python=sys.executable,
            requirements=REQUIREMENTS,
        )

    def option_violations(self, options: Mapping[str, Any]) -> list[FieldViolation]:
        return option_violations(options)

    def files(self, entry: str, context: AgentContext) -> dict[str, bytes]:
        return {
            CONFIG_FILE: json.dumps(config_document(context.options)).encode(),
            INSTRUCTION_FILE: context.instruction.encode(),
            RUNNER_FILE: Path(mini_swe_agent_runner.__file__).read_bytes(),
            LAUNCHER: _launcher(entry),
        }

    def env(self, model: ModelAccess, options: Mapping[str, Any]) -> dict[str, str]:
        return {
            "MSWEA_MODEL_NAME": f"openai/{model.model}",
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": model.api_key,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_GLOBAL_CONFIG_DIR": f"{ROOT}/config",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "HF_HUB_OFFLINE": "1",
            "LITELLM_MODE": "PRODUCTION",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
        }

    def events(self, emit: EmitOutput) -> EventStream:
        return JsonLineStream(emit, translate_message, agent=self.name, limits=LineLimits())


class MiniSweAgent(HarnessAgent):
    """Runs mini-swe-agent (pinned) on the task's instruction."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, MiniSweHarness())
