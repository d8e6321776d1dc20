"""Set up once, fork n: a group's task files and setup commands run once, in a template
sandbox, and every member starts from a copy-on-write snapshot of what they left (a
session's copies likewise: `engine.sessions`).

Here, below the phase machine, groups and sessions: each of them uses it.

    template sandbox: stage task files -> setup commands (first failure: the group fails,
    kind SETUP, and no member starts) -> reclaim (nothing left running) -> snapshot
    (`SandboxBackend.snapshot`) -> kill the template.
    member: created from the snapshot (`SandboxRequest.snapshot`), in place of staging and
    setup; its setup results are the template's.
    group end: the snapshot is released (`GroupRun`), once no member is left.

Where the backend cannot snapshot (`can_snapshot`: E2B, a server not running as root)
each member stages and sets up on its own, as a lone rollout does. No agent ever runs
in the template; its setup is the task author's, as a lone rollout's is. A server
restarted mid-group starts refills with plain setup (the snapshot went with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from dataclasses import dataclass

from service.engine.staging import make_workdir, stage
from service.errors import RolloutFailure, SandboxError
from service.models import CommandResult, CommandStage, ErrorKind, RolloutSpec
from service.sandboxes import SandboxBackend, SandboxRequest, Snapshot, in_workdir
from service.verifier import run_commands

__all__ = ["PreparedFilesystem", "prepare_filesystem", "worth_a_template"]

log = logging.getLogger(__name__)

_SNAPSHOT_MARGIN_S = 300.0
"""The template's lifetime past its setup budget: staging, reclaim and the snapshot."""
_CREATE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class PreparedFilesystem:
    """What the template's setup left, for every member to start from."""

    snapshot: Snapshot
    setup_results: tuple[CommandResult, ...]


def worth_a_template(spec: RolloutSpec, n: int, backend: SandboxBackend) -> bool:
    """Whether forking saves anything (more than one member, something to set up) and the
    backend can fork sandboxes of this spec."""
    wanted = n > 1 and bool(spec.task.setup or spec.task.files)
    return wanted and backend.can_snapshot(spec.sandbox)


async def prepare_filesystem(
    backend: SandboxBackend, spec: RolloutSpec, *, name: str, command_timeout_s: float
) -> PreparedFilesystem | None:
    """Run the task's staging and setup once in a template sandbox and snapshot it;
    RolloutFailure (SETUP) if a setup command fails, SandboxError if the template cannot
    be made. None if the snapshot failed (logged): the backend works, so each member sets
    up on its own rather than the group failing (e.g. an E2B team without snapshots)."""
    request = SandboxRequest(
        rollout_id=name,
        spec=spec.sandbox,
        lifetime_s=command_timeout_s * (len(spec.task.setup) + 1) + _SNAPSHOT_MARGIN_S,
    )
    try:
        sandbox = await asyncio.wait_for(backend.create(request), _CREATE_TIMEOUT_S)
    except TimeoutError as exc:  # not the group's deadline, which is a TimeoutError too
        raise SandboxError(f"template sandbox not created within {_CREATE_TIMEOUT_S:g}s") from exc
    try:
        await make_workdir(sandbox, spec.task)
        await stage(sandbox, spec.task, spec.task.files)
        results = await run_commands(
            sandbox,
            spec.task.setup,
            stage=CommandStage.SETUP,
            timeout_s=command_timeout_s,
            env=spec.task.env,  # as a lone rollout's setup runs (`RolloutRun._commands`)
            wrap=functools.partial(in_workdir, spec.task.workdir),
            on_result=lambda result: None,
            stop_on_failure=True,
        )
        failed = next((r for r in results if not r.passed), None)
        if failed is not None:
            detail = "timed out" if failed.timed_out else f"exit {failed.exit_code}"
            tail = failed.stderr.strip()[-300:]
            message = f"setup[{failed.index}] failed ({detail}), once for the group: {tail}"
            raise RolloutFailure(message, kind=ErrorKind.SETUP)
        await sandbox.reclaim()  # what setup left running must not write mid-snapshot
        try:
            return PreparedFilesystem(await backend.snapshot(sandbox), tuple(results))
        except SandboxError as exc:
            log.warning("%s: no snapshot, each member sets up on its own: %s", name, exc)
            return None
    finally:
        with contextlib.suppress(Exception):
            await asyncio.shield(sandbox.kill())
