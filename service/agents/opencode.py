"""The `opencode` harness: the opencode coding agent, non-interactive, against the rollout's model.

`HarnessAgent` installs and finds the pinned opencode-ai (`opencode_install`); this module
writes opencode's private files and launcher (`opencode_config`) and reads its
`run --format json` event lines (`opencode_events`). The launcher starts the binary in
the workdir with the instruction on stdin, and adds the server's `rg` to its PATH.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import weakref
from collections.abc import Mapping
from typing import Any

from service.agents.base import AgentContext, AgentOutcome, EmitOutput
from service.agents.harness import EventStream, HarnessAgent, closed_to_sandbox_users
from service.agents.opencode_config import (
    INSTRUCTION_FILE,
    LAUNCHER,
    XDG_ROOT,
    launcher_script,
    opencode_env,
    option_violations,
    seed_files,
)
from service.agents.opencode_events import OpencodeEventStream
from service.agents.opencode_install import opencode_package
from service.agents.opencode_warm import CLEANUP, discard, hand_over, holder_script, settled
from service.agents.process import task_launch, wait_for_agent
from service.config import Settings
from service.errors import FieldViolation
from service.models.model_access import ModelAccess
from service.sandboxes.base import OutputCallback, Sandbox, in_workdir
from service.sandboxes.local.warm_agent import (
    AgentPlan,
    PrestartedAgent,
    has_warm_agents,
    learn,
    take,
)

__all__ = ["OpencodeAgent", "OpencodeHarness", "closed_to_sandbox_users"]

log = logging.getLogger(__name__)


class OpencodeHarness:
    """opencode-ai at `settings.opencode_version`."""

    name = "opencode"
    install_typical = "15-70s"
    home = XDG_ROOT
    launcher = LAUNCHER

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
    with `settings.local_warm_agents`, in an opencode started ahead when it is exactly the
    one this rollout would start (`opencode_warm`)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, OpencodeHarness(settings))
        self._warm: weakref.WeakKeyDictionary[Sandbox, PrestartedAgent] = (
            weakref.WeakKeyDictionary()
        )
        """The opencode started ahead in a sandbox, taken at prepare() for run()."""
        self.warm_runs = 0
        """Runs handed to an opencode started ahead (tests and benchmarks read it)."""

    async def prepare(self, sandbox: Sandbox, context: AgentContext) -> None:
        plan = None
        if context.model is not None and has_warm_agents(sandbox):
            if self.option_violations(context.options):
                return await super().prepare(sandbox, context)  # raises, naming the field
            plan = self._plan(str(await self._install.ensure()), context, context.model)
        warm = take(sandbox)
        if warm is not None and not (
            plan is not None and warm.plan == plan and await settled(warm)
        ):
            await discard(sandbox, warm)
            warm = None
        await super().prepare(sandbox, context)
        if plan is not None and not context.env:
            # A task's environment is code (bash expands BASH_ENV, LD_PRELOAD loads a
            # library): started ahead, it would run in the sandbox of whichever rollout,
            # of whichever tenant, claims the next one, and leave there what it wrote.
            learn(sandbox, plan)
        if warm is not None:
            self._warm[sandbox] = warm

    def _plan(self, entry: str, context: AgentContext, model: ModelAccess) -> AgentPlan:
        """What the cold path starts for `context`, as a warm sandbox would start it."""
        files = self._harness.files(entry, context)
        del files[INSTRUCTION_FILE]  # the rollout's own: written by prepare(), read at run()
        command, env = task_launch(context, *self._launch(model, context))
        holder = in_workdir(context.workdir, holder_script())
        return AgentPlan.of(files, holder, command, env, agent=self.name, cleanup=CLEANUP)

    async def _start(
        self,
        sandbox: Sandbox,
        context: AgentContext,
        command: str,
        env: dict[str, str],
        on_output: OutputCallback,
    ) -> AgentOutcome:
        warm = self._warm.pop(sandbox, None)
        if warm is None:
            return await super()._start(sandbox, context, command, env, on_output)
        launched = AgentPlan.of({}, "", *task_launch(context, command, env))
        same = (warm.plan.command, warm.plan.env) == (launched.command, launched.env)
        try:
            handed = same and await hand_over(sandbox, warm, context.workdir)
        except BaseException:
            await asyncio.shield(warm.kill())
            raise
        if not handed or warm.process is None:
            log.info("opencode started ahead in %s was not handed over: cold", sandbox.id)
            await discard(sandbox, warm)
            await super().prepare(sandbox, context)
            return await super()._start(sandbox, context, command, env, on_output)
        self.warm_runs += 1
        log.info("opencode in %s was started ahead: handed its instruction", sandbox.id)
        warm.attach(on_output)
        try:
            return await wait_for_agent(warm.process, context)
        finally:
            await asyncio.shield(warm.kill())


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
