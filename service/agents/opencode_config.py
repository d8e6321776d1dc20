"""opencode's configuration for one rollout: `OPENCODE_CONFIG_CONTENT` and the environment.

What opencode 1.18 does unless told otherwise, and how each is turned off here:

- fetches models.dev at start: `OPENCODE_DISABLE_MODELS_FETCH=1`; without a fetch it loads
  its cache (`models.json`), else parses the copy bundled in its binary, ~0.8 s of CPU at
  every start: `seed_files` writes an empty cache (the rollout's provider and models are all
  in the config, so what it sends is the same);
- checks for updates / shares sessions: `autoupdate: false`, `share: "disabled"`,
  `OPENCODE_DISABLE_AUTOUPDATE=1`, `OPENCODE_DISABLE_SHARE=1`;
- npm-installs `@opencode-ai/plugin` into its config directory at every start (in the
  background): skipped when that directory already has `node_modules` and a lock file
  naming the package, which `seed_files` writes;
- downloads LSP servers: `OPENCODE_DISABLE_LSP_DOWNLOAD=1` (LSP and formatters are off
  unless configured);
- git snapshots of the workdir for undo: `snapshot: false` (useless here, slow on big repos);
- asks before acting: every permission `allow`, except the disabled tools' `deny` (a
  denied tool is not offered to the model at all).

Tools opencode 1.18 offers in `run`: bash, edit, glob, grep, read, skill, task, todowrite,
webfetch, write (question is denied by `run` itself; lsp, plan and websearch only behind
experimental flags).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from service.errors import FieldViolation
from service.models import ModelAccess
from service.sandboxes import HOME

__all__ = [
    "DEFAULT_DISABLED_TOOLS",
    "INSTRUCTION_FILE",
    "LAUNCHER",
    "MODELS_CACHE",
    "OPTION_NAMES",
    "PROVIDER_ID",
    "XDG_ROOT",
    "config_content",
    "launcher_script",
    "opencode_env",
    "option_violations",
    "seed_files",
]

PROVIDER_ID = "rollout"
XDG_ROOT = f"{HOME}/.opencode-xdg"
"""opencode's private config, data, cache and state directories inside the sandbox."""
INSTRUCTION_FILE = f"{XDG_ROOT}/instruction.md"
"""The task instruction, fed to `opencode run` on stdin (verbatim, no shell quoting)."""
MODELS_CACHE = f"{XDG_ROOT}/cache/opencode/models.json"
"""opencode's models.dev cache, written empty (see the module docstring)."""
LAUNCHER = f"{XDG_ROOT}/run.sh"
"""Starts the chosen opencode binary; written by prepare(), run by run()."""
DEFAULT_DISABLED_TOOLS = ("webfetch", "question")
OPTION_NAMES = frozenset({"disabled_tools", "system_prompt"})
_OPTIONS_FIELD = "spec.agent.options"


def option_violations(options: Mapping[str, Any]) -> list[FieldViolation]:
    """What is wrong with the opencode options, one violation per offending field."""
    known = ", ".join(sorted(OPTION_NAMES))
    violations = [
        FieldViolation(f"{_OPTIONS_FIELD}.{name}", f"unknown opencode option (known: {known})")
        for name in options
        if name not in OPTION_NAMES
    ]
    tools = options.get("disabled_tools", list(DEFAULT_DISABLED_TOOLS))
    if not isinstance(tools, list | tuple) or not all(isinstance(t, str) and t for t in tools):
        violations.append(
            FieldViolation(f"{_OPTIONS_FIELD}.disabled_tools", "must be a list of tool names")
        )
    if not isinstance(options.get("system_prompt", ""), str):
        violations.append(FieldViolation(f"{_OPTIONS_FIELD}.system_prompt", "must be a string"))
    return violations


def config_content(model: ModelAccess, options: Mapping[str, Any]) -> dict[str, Any]:
    """The config document (options must have passed `option_violations`)."""
    models = {name: {"name": name} for name in (model.model, model.small_model)}
    permission: dict[str, str] = {"*": "allow"}
    permission |= {tool: "deny" for tool in options.get("disabled_tools", DEFAULT_DISABLED_TOOLS)}
    config: dict[str, Any] = {
        "provider": {
            PROVIDER_ID: {
                "npm": "@ai-sdk/openai-compatible",
                "name": PROVIDER_ID,
                "options": {"baseURL": model.base_url, "apiKey": model.api_key},
                "models": models,
            }
        },
        "enabled_providers": [PROVIDER_ID],
        "model": f"{PROVIDER_ID}/{model.model}",
        "small_model": f"{PROVIDER_ID}/{model.small_model}",
        "autoupdate": False,
        "share": "disabled",
        "snapshot": False,
        "permission": permission,
    }
    system_prompt = options.get("system_prompt", "")
    if system_prompt:
        # The build agent (opencode's default) takes this in place of its own base prompt.
        config["agent"] = {"build": {"prompt": system_prompt}}
    return config


def opencode_env(model: ModelAccess, options: Mapping[str, Any]) -> dict[str, str]:
    """Environment for `opencode run` (holds the agent's model token: never log it)."""
    return {
        "XDG_CONFIG_HOME": f"{XDG_ROOT}/config",
        "XDG_DATA_HOME": f"{XDG_ROOT}/data",
        "XDG_CACHE_HOME": f"{XDG_ROOT}/cache",
        "XDG_STATE_HOME": f"{XDG_ROOT}/state",
        "OPENCODE_CONFIG_CONTENT": json.dumps(config_content(model, options)),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    }


def seed_files(instruction: str, *, empty_models_cache: bool = True) -> dict[str, bytes]:
    """Files prepare() writes into the sandbox before opencode's first start
    (`empty_models_cache` False only to measure the start-up without it)."""
    config_dir = f"{XDG_ROOT}/config/opencode"
    lock = {"packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}
    files = {
        f"{config_dir}/node_modules/.keep": b"",
        f"{config_dir}/package-lock.json": json.dumps(lock).encode(),
        INSTRUCTION_FILE: instruction.encode(),
    }
    if empty_models_cache:
        files[MODELS_CACHE] = b"{}"
    return files


def launcher_script(binary: str, tools_dir: str = "") -> bytes:
    """`run.sh`: opencode in the workdir, the instruction on stdin, JSON events on stdout;
    `tools_dir`, if given, is added to the end of PATH (where the server's `rg` lives)."""
    command = f"exec {shlex.quote(binary)} run --pure --format json"
    path = f'export PATH="$PATH"{shlex.quote(":" + tools_dir)}\n' if tools_dir else ""
    return f"{path}{command} < {shlex.quote(INSTRUCTION_FILE)}\n".encode()
