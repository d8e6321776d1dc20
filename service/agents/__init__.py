"""Agents: the `Agent` protocol (`base`) and its harnesses, each built by name through
`service.registry`; what the engine and the server use of them is exported here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.door import door

if TYPE_CHECKING:
    from service.agents.base import ORACLE, Agent, AgentContext, AgentOutcome, EmitOutput, Progress
    from service.agents.command import model_env
    from service.agents.opencode_config import XDG_ROOT, opencode_env, seed_files
    from service.agents.opencode_install import OpencodeInstaller, install_script, npm_missing

__all__ = [
    "ORACLE",
    "XDG_ROOT",
    "Agent",
    "AgentContext",
    "AgentOutcome",
    "EmitOutput",
    "OpencodeInstaller",
    "Progress",
    "install_script",
    "model_env",
    "npm_missing",
    "opencode_env",
    "seed_files",
]

__getattr__ = door(__name__)
