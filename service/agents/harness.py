"""The common base of the packaged agents (opencode, claude-code, codex, mini-swe-agent).

A harness module says only what is its own, as a `Harness`: the pinned package, the files
that configure it offline (written by prepare()), the environment and launcher that run it
headless on the instruction, and how its stdout lines become live events. `HarnessAgent`
does the rest, the same for every one of them:

- provision(): on a backend whose sandboxes see the service's cache (local), install the
  package there once per machine (`CachedInstall`: locked across processes, progress as
  phase messages), and check that a sandbox user can reach it;
- prepare(): the cache's entry when the sandbox sees the cache, else the package's own
  `sandbox_script` run inside the sandbox (a template with it pre-installed, else its
  package manager); then the harness's files;
- run(): the launcher through the launch path every agent shares (`process.run_in_task`):
  in the task's workdir, with the task's env under the harness's, killed with its
  children at the deadline or on cancel; the instruction verbatim from a file, stdout
  through the harness's translator as live events;
- started ahead, for a harness with a `warm` (`warm_start`) on a backend that starts agents
  ahead (`sandboxes.prestart`): prepare() teaches the backend the rollout's exact launch and
  takes the process started ahead in its sandbox, used by run() only if it is that launch.

A harness's own files (`files`, its launcher, its install) live at absolute paths under
HOME, in its `home` and its package's `sandbox_prefix` (the agent's `state_dirs`), and its
program starts in the working directory it is given, never one of its own: so it works
where the task says, and none of its state is in the task's workdir nor, when that
workdir is HOME or above, in what is collected from it.

An entry that cannot be installed or found is `AgentInstallError` (infrastructure,
retried), never `AGENT`, which a trainer scores. A host without the package's installer
(and no install in the cache) cannot build the harness: its rollouts are refused at
admission (`MissingDependencyError`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shlex
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from service.agents.base import AgentContext, AgentOutcome, EmitOutput, Progress
from service.agents.cached_install import CachedInstall, installer_missing
from service.agents.packages import Package
from service.agents.process import run_in_task, task_launch, wait_for_agent
from service.agents.warm_start import WarmStart, discard, hand_over, holder_script, settled
from service.config import Settings
from service.errors import AgentError, AgentInstallError, FieldViolation, MissingDependencyError
from service.models import ModelAccess
from service.sandboxes import (
    AgentPlan,
    Capabilities,
    HeadTailBuffer,
    OutputCallback,
    OutputStream,
    PrestartedAgent,
    Sandbox,
    has_warm_agents,
    in_workdir,
    learn,
    take,
)

__all__ = ["EventStream", "Harness", "HarnessAgent", "closed_to_sandbox_users"]

log = logging.getLogger(__name__)

_PROBE_TIMEOUT_S = 60.0
_SANDBOX_INSTALL_TIMEOUT_S = 900.0


class EventStream(Protocol):
    """Turns the agent's output chunks into live events."""

    def feed(self, chunk: bytes) -> None: ...

    def stderr(self, chunk: bytes) -> None: ...

    def close(self) -> None: ...


class Harness(Protocol):
    """What one packaged agent is: everything `HarnessAgent` cannot know."""

    name: str
    install_typical: str
    """How long its install usually takes ("15-70s"), for the progress message."""
    home: str
    """Sandbox path of its own directory under HOME: where `files` writes and its program
    keeps its state (the package's install has a directory of its own beside it)."""
    launcher: str
    """Sandbox path of the script that starts it (written by `files`); the script starts
    the program in its own working directory, which is the task's."""

    @property
    def warm(self) -> WarmStart | None:
        """How it is started ahead (`warm_start`); None: never, always cold."""
        ...

    @property
    def package(self) -> Package:
        """The pinned package it runs."""
        ...

    def option_violations(self, options: Mapping[str, Any]) -> list[FieldViolation]:
        """What is wrong with `spec.agent.options`, each naming its field."""
        ...

    def files(self, entry: str, context: AgentContext) -> dict[str, bytes]:
        """Files prepare() writes into the sandbox: config, instruction, the launcher
        (which starts `entry`, the installed program as the sandbox sees it); at absolute
        paths in a directory of the harness's own under HOME, never in the workdir."""
        ...

    def env(self, model: ModelAccess, options: Mapping[str, Any]) -> dict[str, str]:
        """Environment of the run: offline switches and the model access (holds the
        agent's model token: never log it)."""
        ...

    def events(self, emit: EmitOutput) -> EventStream:
        """A fresh translator of one run's output."""
        ...


class HarnessAgent:
    """An `Agent` running `harness`'s pinned package on the task's instruction."""

    requires_model = True

    def __init__(self, settings: Settings, harness: Harness) -> None:
        self.name = harness.name
        self.state_dirs = (harness.home, harness.package.sandbox_prefix)
        self._settings = settings
        self._harness = harness
        # Resolved as the local backend binds it, so host paths hold inside the sandbox.
        self._cache_dir = Path(os.path.realpath(settings.cache_dir))
        self._install = CachedInstall(
            self._cache_dir, harness.package, typical=harness.install_typical
        )
        missing = installer_missing(self._install)
        if missing is not None:
            raise MissingDependencyError(missing)
        self._warm: weakref.WeakKeyDictionary[Sandbox, PrestartedAgent] = (
            weakref.WeakKeyDictionary()
        )
        """The agent started ahead in a sandbox, taken at prepare() for run()."""
        self.warm_runs = 0
        """Runs handed to an agent started ahead (tests and benchmarks read it)."""

    def option_violations(self, options: Mapping[str, Any]) -> list[FieldViolation]:
        return self._harness.option_violations(options)

    async def provision(self, backend: Capabilities, progress: Progress) -> None:
        if not backend.host_cache:
            return
        entry = await self._install.ensure(progress)
        closed = closed_to_sandbox_users(entry, self._cache_dir)
        if closed is not None:
            mode = f"{closed.stat().st_mode & 0o777:o}"
            raise AgentInstallError(
                f"{closed} is not open to sandbox users (mode {mode}), so they cannot run "
                f"{entry}: chmod o+rx {closed}"
            )

    async def prepare(self, sandbox: Sandbox, context: AgentContext) -> None:
        warm = self._harness.warm
        if warm is None:
            return await self._prepare_cold(sandbox, context)
        plan = None
        if context.model is not None and has_warm_agents(sandbox):
            if self.option_violations(context.options):
                return await self._prepare_cold(sandbox, context)  # raises, naming the field
            plan = self._plan(warm, str(await self._install.ensure()), context, context.model)
        started = take(sandbox)
        if started is not None:
            same = plan is not None and started.plan == plan
            if not (same and await settled(started)):
                why = "not settled" if same else "another launch"
                log.info("%s started ahead in %s not used (%s)", self.name, sandbox.id, why)
                await discard(sandbox, warm, started)
                started = None
        await self._prepare_cold(sandbox, context)
        if plan is not None and not context.env:
            # A task's environment is code (bash expands BASH_ENV, LD_PRELOAD loads a
            # library): started ahead, it would run in the sandbox of whichever rollout,
            # of whichever tenant, claims the next one, and leave there what it wrote.
            learn(sandbox, plan)
        if started is not None:
            self._warm[sandbox] = started

    async def _prepare_cold(self, sandbox: Sandbox, context: AgentContext) -> None:
        violations = self._harness.option_violations(context.options)
        if violations:
            raise AgentError("; ".join(f"{v.field}: {v.description}" for v in violations))
        entry = await self._entry_for(sandbox, context)
        await sandbox.write_files(self._harness.files(entry, context))

    def _plan(
        self, warm: WarmStart, entry: str, context: AgentContext, model: ModelAccess
    ) -> AgentPlan:
        """What the cold path starts for `context`, as a warm sandbox would start it."""
        files = self._harness.files(entry, context)
        del files[warm.instruction_file]  # the rollout's own: written by prepare()
        command, env = task_launch(context, *self._launch(model, context))
        holder = in_workdir(context.workdir, holder_script(warm))
        return AgentPlan.of(files, holder, command, env, agent=self.name, cleanup=warm.cleanup)

    async def run(self, sandbox: Sandbox, context: AgentContext, emit: EmitOutput) -> AgentOutcome:
        model = self._model_of(context)
        events = self._harness.events(emit)
        tail = HeadTailBuffer(0, self._settings.agent_log_tail_bytes)

        def on_output(stream: OutputStream, chunk: bytes) -> None:
            tail.feed(chunk)
            if stream is OutputStream.STDOUT:
                events.feed(chunk)
            else:
                events.stderr(chunk)

        command, env = self._launch(model, context)
        started = time.monotonic()
        try:
            outcome = await self._start(sandbox, context, command, env, on_output)
        finally:
            events.close()
        log.debug(
            "%s in %s ended after %.1fs (exit %s, timed out %s)",
            self.name,
            sandbox.id,
            time.monotonic() - started,
            outcome.exit_code,
            outcome.timed_out,
        )
        return dataclasses.replace(outcome, log_tail=tail.text())

    def _launch(self, model: ModelAccess, context: AgentContext) -> tuple[str, dict[str, str]]:
        """The command and the harness's environment run() starts."""
        return f"exec bash {shlex.quote(self._harness.launcher)}", self._harness.env(
            model, context.options
        )

    async def _start(
        self,
        sandbox: Sandbox,
        context: AgentContext,
        command: str,
        env: dict[str, str],
        on_output: OutputCallback,
    ) -> AgentOutcome:
        """Run the launcher (`process.run_in_task`), or hand the instruction to the agent
        started ahead in the sandbox if it is this launch and still as it started."""
        started, warm = self._warm.pop(sandbox, None), self._harness.warm
        if started is None or warm is None:
            return await run_in_task(sandbox, context, command, env=env, on_output=on_output)
        launched = AgentPlan.of({}, "", *task_launch(context, command, env))
        same = (started.plan.command, started.plan.env) == (launched.command, launched.env)
        try:
            handed = same and await hand_over(sandbox, warm, started, context.workdir)
        except BaseException:
            await asyncio.shield(started.kill())
            raise
        if not handed or started.process is None:
            log.info("%s started ahead in %s was not handed over: cold", self.name, sandbox.id)
            await discard(sandbox, warm, started)
            await self._prepare_cold(sandbox, context)
            return await run_in_task(sandbox, context, command, env=env, on_output=on_output)
        self.warm_runs += 1
        log.info("%s in %s was started ahead: handed its instruction", self.name, sandbox.id)
        started.attach(on_output)
        try:
            return await wait_for_agent(started.process, context)
        finally:
            await asyncio.shield(started.kill())

    async def _entry_for(self, sandbox: Sandbox, context: AgentContext) -> str:
        probe = await sandbox.exec(
            f"test -d {shlex.quote(str(self._cache_dir))}", timeout_s=_PROBE_TIMEOUT_S
        )
        if probe.exit_code == 0:
            return str(await self._install.ensure())
        return await self._install_in_sandbox(sandbox, context)

    async def _install_in_sandbox(self, sandbox: Sandbox, context: AgentContext) -> str:
        """The package's own lookup, else its install (`context.env` may configure it)."""
        package = self._harness.package
        log.info("sandbox %s: looking for or installing %s", sandbox.id, package.label)
        result = await sandbox.exec(
            package.sandbox_script(package.sandbox_prefix),
            timeout_s=_SANDBOX_INSTALL_TIMEOUT_S,
            env=dict(context.env),
        )
        if result.exit_code != 0:
            detail = "timed out" if result.timed_out else f"exit {result.exit_code}"
            message = package.error_message(result.stderr)
            raise AgentInstallError(
                f"installing {self.name} in the sandbox failed ({detail}): {message}"
            )
        lines = result.stdout.strip().splitlines()
        if not lines:
            raise AgentInstallError(f"installing {self.name} in the sandbox printed no path")
        return lines[-1]

    def _model_of(self, context: AgentContext) -> ModelAccess:
        if context.model is None:
            raise AgentError(f"the {self.name} agent needs an LLM endpoint (spec.endpoint)")
        return context.model


def closed_to_sandbox_users(entry: Path, cache_dir: Path) -> Path | None:
    """The first directory from `cache_dir` down to `entry` that a sandbox user, a uid of
    its own when the server runs as root, cannot enter (e.g. a cache made by `mktemp -d`)."""
    if os.geteuid() != 0:
        return None  # sandboxes keep the server's own uid
    for directory in (cache_dir, *reversed(entry.relative_to(cache_dir).parents[:-1])):
        path = directory if directory == cache_dir else cache_dir / directory
        if not path.stat().st_mode & 0o001:
            return path
    return None
