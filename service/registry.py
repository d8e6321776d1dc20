"""Name -> implementation maps for sandbox backends and agent harnesses.

Implementations are imported only when first asked for, so a missing optional
dependency (the e2b SDK, say) breaks only the rollouts that need it, with a
message that says what to install.
"""

from __future__ import annotations

import importlib
from typing import Any

from service.agents import Agent
from service.config import Settings
from service.errors import MissingDependencyError
from service.sandboxes import Capabilities, SandboxBackend

__all__ = ["AGENTS", "BACKENDS", "backend_capabilities", "load_agent", "load_backend"]

BACKENDS: dict[str, tuple[str, str]] = {
    "local": ("service.sandboxes.local.backend:LocalBackend", "the Debian package bubblewrap"),
    "e2b": ("service.sandboxes.e2b.backend:E2BBackend", "the Python package e2b"),
}
"""Backend name -> (import path, what to install when the import fails)."""

AGENTS: dict[str, tuple[str, str]] = {
    "command": ("service.agents.command:CommandAgent", ""),
    "oracle": ("service.agents.oracle:OracleAgent", ""),
    "opencode": ("service.agents.opencode:OpencodeAgent", "npm (Node.js) for opencode-ai"),
    "claude-code": ("service.agents.claude_code:ClaudeCodeAgent", "npm for claude-code"),
    "codex": ("service.agents.codex:CodexAgent", "npm for codex"),
    "mini-swe-agent": ("service.agents.mini_swe_agent:MiniSweAgent", "pip for mini-swe-agent"),
}
"""Agent name -> (import path, what to install when the import fails)."""


def _find(table: dict[str, tuple[str, str]], name: str) -> Any:
    """The implementation called `name`, imported now."""
    target, requirement = table[name]
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if (exc.name or "").startswith("service"):
            raise  # our own import is broken: a bug, not a missing dependency
        raise MissingDependencyError(
            f"{name!r} needs {requirement or exc.name}: install it ({exc})"
        ) from exc
    return getattr(module, attribute)


def load_backend(name: str, settings: Settings) -> SandboxBackend:
    """Build the backend called `name` (a key of BACKENDS)."""
    backend: SandboxBackend = _find(BACKENDS, name)(settings)
    return backend


def backend_capabilities(name: str) -> Capabilities:
    """What the sandboxes of the backend called `name` can do, as its class declares, without
    building it; a name that is no backend can do nothing (the spec's check names it)."""
    if name not in BACKENDS:
        return Capabilities()
    capabilities: Capabilities = _find(BACKENDS, name).capabilities
    return capabilities


def load_agent(name: str, settings: Settings) -> Agent:
    """Build the harness called `name` (a key of AGENTS)."""
    agent: Agent = _find(AGENTS, name)(settings)
    return agent
