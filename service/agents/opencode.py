"""The `opencode` harness: the opencode coding agent, non-interactive, against the rollout's model.

`HarnessAgent` installs and finds the pinned opencode-ai (`opencode_install`); this module
writes opencode's private files and launcher (`opencode_config`) and reads its
`run --format json` event lines (`opencode_events`). The launcher starts the binary in
the workdir with the instruction on stdin, and adds the server's `rg` to its PATH.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any

from service.agents.base import AgentContext, EmitOutput
from service.agents.harness import EventStream, HarnessAgent, closed_to_sandbox_users
from service.agents.opencode_config import (
    LAUNCHER,
    XDG_ROOT,
    launcher_script,
    opencode_env,
    option_violations,
    seed_files,
)
from service.agents.opencode_events import OpencodeEventStream
from service.agents.opencode_install import opencode_package
from service.agents.opencode_warm import OPENCODE_WARM
from service.config import Settings
from service.errors import FieldViolation
from service.models import ModelAccess

__all__ = ["OpencodeAgent", "OpencodeHarness", "closed_to_sandbox_users"]

log = logging.getLogger(__name__)


class OpencodeHarness:
    """opencode-ai at `settings.opencode_version`."""

    name = "opencode"
    install_typical = "15-70s"
    home = XDG_ROOT
    launcher = LAUNCHER
    warm = OPENCODE_WARM

    def __init__(self, settings: Settings) -> None:
        self.package = opencode_package(settings.opencode_version)
        self._tools_dir = _ripgrep_dir()
        self._empty_models_cache = settings.opencode_empty_models_cache

    def option_violations(self, options: Mapping[str, Any]) -> list[FieldViolation]:
        return option_violations(options)

    def files(self, entry: str, context: AgentContext) -> dict[str, bytes]:
        seeds = seed_files(context.instruction, empty_models_cache=self._empty_models_cache)
        return seeds | {LAUNCHER: launcher_script(entry, self._tools_dir)}

    def env(self, model: ModelAccess, options: Mapping[str, Any]) -> dict[str, str]:
        return opencode_env(model, options)

    def events(self, emit: EmitOutput) -> EventStream:
        return OpencodeEventStream(emit)


class OpencodeAgent(HarnessAgent):
    """Runs the pinned opencode-ai (`settings.opencode_version`) on the task's instruction;
    started ahead where the backend does (`opencode_warm`)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, OpencodeHarness(settings))


def _ripgrep_dir() -> str:
    """The directory to add to opencode's PATH for `rg` ("" when PATH has it already).

    opencode's grep and glob tools need `rg`; without it opencode downloads one from GitHub,
    which fails offline. The ripgrep wheel puts it beside the server's interpreter, which is
    on no PATH when the project's venv is used without being activated (`make run`).
    """
    if shutil.which("rg") is not None:
        return ""
    beside_interpreter = os.path.dirname(sys.executable)
    if shutil.which("rg", path=beside_interpreter) is not None:
        return beside_interpreter
    log.warning("ripgrep (rg) is not on PATH: opencode's grep and glob tools will fail")
    return ""
