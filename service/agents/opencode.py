"""The `opencode` harness: the opencode coding agent, non-interactive, against the rollout's model.

prepare() finds (or installs) the pinned opencode binary as the sandbox sees it and writes
opencode's private files into the sandbox; run() starts `opencode run --format json` in the
workdir with the instruction on stdin and turns its JSON event lines into live output.

Where the binary comes from, decided by what the sandbox can see:
- the service's cache directory is visible (the local sandbox binds it read-only): the host
  install, made once per machine by `OpencodeInstaller` in provision(), before the
  rollout's sandbox exists;
- otherwise (a remote sandbox): an `opencode` on PATH that reports the pinned version (a
  template with it pre-installed), else `npm install` of the pinned version in the sandbox.

A binary that cannot be installed or found is `AgentInstallError` (infrastructure, retried),
never `AGENT`, which a trainer scores. Without npm on the server's PATH (and no install in
the cache) the harness cannot be built: opencode rollouts are refused at admission.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from service.agents.base import AgentContext, AgentOutcome, EmitOutput, ModelAccess, Progress
from service.agents.opencode_config import (
    LAUNCHER,
    launcher_script,
    opencode_env,
    option_violations,
    seed_files,
)
from service.agents.opencode_events import OpencodeEventStream
from service.agents.opencode_install import (
    OpencodeInstaller,
    install_script,
    npm_error_message,
    npm_missing,
)
from service.agents.process import wait_with_deadline
from service.config import Settings
from service.errors import AgentError, AgentInstallError, FieldViolation
from service.registry import MissingDependencyError
from service.sandboxes.base import HOME, OutputStream, Sandbox
from service.sandboxes.output import HeadTailBuffer

__all__ = ["OpencodeAgent"]

log = logging.getLogger(__name__)

_PROBE_TIMEOUT_S = 60.0
_SANDBOX_INSTALL_TIMEOUT_S = 900.0
_SANDBOX_PREFIX = f"{HOME}/.opencode-npm"
_HOST_CACHE_BACKENDS = frozenset({"local"})
"""Backends whose sandboxes see the service's cache directory (bound read-only by bwrap)."""


class OpencodeAgent:
    """Runs the pinned opencode-ai (`settings.opencode_version`) on the task's instruction."""

    name = "opencode"
    requires_model = True

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        # Resolved as the local backend binds it, so host paths hold inside the sandbox.
        self._cache_dir = Path(os.path.realpath(settings.cache_dir))
        self._installer = OpencodeInstaller(self._cache_dir, settings.opencode_version)
        missing = npm_missing(self._installer)
        if missing is not None:
            raise MissingDependencyError(missing)
        self._tools_dir = _ripgrep_dir()

    def option_violations(self, options: Mapping[str, Any]) -> list[FieldViolation]:
        return option_violations(options)

    async def provision(self, backend: str, progress: Progress) -> None:
        if backend in _HOST_CACHE_BACKENDS:
            binary = await self._installer.ensure(progress)
            closed = closed_to_sandbox_users(binary, self._cache_dir)
            if closed is not None:
                mode = f"{closed.stat().st_mode & 0o777:o}"
                raise AgentInstallError(
                    f"{closed} is not open to sandbox users (mode {mode}), so they cannot run "
                    f"{binary}: chmod o+rx {closed}"
                )

    async def prepare(self, sandbox: Sandbox, context: AgentContext) -> None:
        violations = option_violations(context.options)
        if violations:
            raise AgentError("; ".join(f"{v.field}: {v.description}" for v in violations))
        binary = await self._binary_for(sandbox, context)
        launcher = launcher_script(binary, self._tools_dir)
        files = seed_files(context.instruction) | {LAUNCHER: launcher}
        await sandbox.write_files(files)

    async def run(self, sandbox: Sandbox, context: AgentContext, emit: EmitOutput) -> AgentOutcome:
        model = _model_of(context)
        events = OpencodeEventStream(emit)
        tail = HeadTailBuffer(0, self._settings.agent_log_tail_bytes)

        def on_output(stream: OutputStream, chunk: bytes) -> None:
            tail.feed(chunk)
            if stream is OutputStream.STDOUT:
                events.feed(chunk)
            else:
                events.stderr(chunk)

        command = f"exec bash {shlex.quote(LAUNCHER)}"
        if model.command_prefix:
            command = f"{model.command_prefix}\n{command}"
        env = dict(context.env) | opencode_env(model, context.options)
        started = time.monotonic()
        process = await sandbox.spawn(command, env=env, on_output=on_output)
        try:
            outcome = await wait_with_deadline(process, context.timeout_s)
        finally:
            events.close()
        log.debug(
            "opencode in %s ended after %.1fs (exit %s, timed out %s)",
            sandbox.id,
            time.monotonic() - started,
            outcome.exit_code,
            outcome.timed_out,
        )
        return dataclasses.replace(outcome, log_tail=tail.text())

    async def _binary_for(self, sandbox: Sandbox, context: AgentContext) -> str:
        probe = await sandbox.exec(
            f"test -d {shlex.quote(str(self._cache_dir))}", timeout_s=_PROBE_TIMEOUT_S
        )
        if probe.exit_code == 0:
            return str(await self._installer.ensure())
        return await self._install_in_sandbox(sandbox, context)

    async def _install_in_sandbox(self, sandbox: Sandbox, context: AgentContext) -> str:
        """opencode on PATH at the pinned version, else npm's (`context.env` may configure npm)."""
        version = shlex.quote(self._settings.opencode_version)
        found = (
            "if command -v opencode >/dev/null 2>&1 && "
            f'[ "$(opencode --version 2>/dev/null)" = {version} ]; then '
            "command -v opencode; exit 0; fi\n"
        )
        script = found + install_script(self._settings.opencode_version, _SANDBOX_PREFIX)
        log.info(
            "sandbox %s: looking for or installing opencode-ai@%s",
            sandbox.id,
            self._settings.opencode_version,
        )
        result = await sandbox.exec(
            script, timeout_s=_SANDBOX_INSTALL_TIMEOUT_S, env=dict(context.env)
        )
        if result.exit_code != 0:
            detail = "timed out" if result.timed_out else f"exit {result.exit_code}"
            message = npm_error_message(result.stderr)
            raise AgentInstallError(
                f"installing opencode in the sandbox failed ({detail}): {message}"
            )
        lines = result.stdout.strip().splitlines()
        if not lines:
            raise AgentInstallError("installing opencode in the sandbox printed no binary path")
        return lines[-1]


def closed_to_sandbox_users(binary: Path, cache_dir: Path) -> Path | None:
    """The first directory from `cache_dir` down to `binary` that a sandbox user, a uid of
    its own when the server runs as root, cannot enter (e.g. a cache made by `mktemp -d`)."""
    if os.geteuid() != 0:
        return None  # sandboxes keep the server's own uid
    for directory in (cache_dir, *reversed(binary.relative_to(cache_dir).parents[:-1])):
        path = directory if directory == cache_dir else cache_dir / directory
        if not path.stat().st_mode & 0o001:
            return path
    return None


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


def _model_of(context: AgentContext) -> ModelAccess:
    if context.model is None:
        raise AgentError("the opencode agent needs an LLM endpoint (spec.endpoint)")
    return context.model
