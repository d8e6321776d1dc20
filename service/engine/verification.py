"""A rollout's verification, called once: in which sandbox it runs, and what of the
agent's it can execute there.

    FRESH      the default wherever the backend can (`carry.PathCarrier`): what the
               verifier executes is never the agent's
      setup    ends with its state frozen (a group member: its group's snapshot)
      agent    ends; its sandbox is taken back (`take_back`: every process killed, what
               it left at the verifier's paths removed) and its workdir and the task's
               `carried_paths` are frozen as a layer
      verify   in a new sandbox made of setup's state and that layer, nothing else of
               the agent's: programs, libraries, the loader's cache, Python's start-up
               paths and site directories, pip's, git's, apt's and pytest's
               configuration and plugins, HOME and its caches are all setup's, under the
               verifier's network policy; the verifier's own directories (VERIFIER_DIR,
               and the top directory of every nested verifier file, e.g. `tests/`) made
               new and empty, then the verifier files staged
    IN_PLACE   the agent's own sandbox, taken back the same way and then checked
               (`verifier.integrity`): a change to what the verifier executes is
               TAMPERED, reward 0, never verified. Weaker (the check names what may not
               change; the list is open-ended) and stricter (an upgrade is tampering):
               for tests that check what the agent installed at system paths, and
               backends that cannot carry (an unprivileged local server). E2B has no
               such check: there IN_PLACE runs whatever the agent left
    AUTO       FRESH where the backend can, else IN_PLACE; a notice says which ran.
               Where the backend can but fails to freeze setup's state (an E2B team
               without filesystem snapshots), IN_PLACE too, its notice saying why

Both run the verify commands with `verifier.environment.VERIFIER_ENV` in the workdir,
and read the reward once every process they started is dead. The agent's sandbox is
never verified in under FRESH, so what is collected from it afterwards is the agent's
work alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from service.engine.staging import stage, staged_path, task_workdir
from service.engine.template import PreparedFilesystem
from service.errors import FieldViolation, SandboxError, SpecError, first_of
from service.models import (
    CommandResult,
    CommandStage,
    EventPayload,
    Notice,
    RolloutSpec,
    VerifyMode,
)
from service.sandboxes import (
    VERIFIER_DIR,
    PathCarrier,
    Sandbox,
    SandboxBackend,
    SandboxRequest,
    Snapshot,
    SystemSeal,
    in_workdir,
)
from service.verifier import (
    BYTECODE_DIR,
    VERIFIER_ENV,
    Reward,
    compute_reward,
    open_verifier_network,
    run_commands,
    take_back,
    tampering,
    verifier_network_notice,
)

__all__ = [
    "Verification",
    "VerifyOutcome",
    "check_verify_mode",
    "verifier_dirs",
    "verifier_sandbox_label",
]

_CREATE_TIMEOUT_S = 600.0
_SHOWN_REASONS = 5


@dataclass(frozen=True)
class VerifyOutcome:
    """What verification gave: its commands' results and the reward, or why the agent's
    sandbox was not verified (`tampered`: IN_PLACE only)."""

    results: list[CommandResult]
    reward: Reward | None
    tampered: str = ""


def check_verify_mode(spec: RolloutSpec, backend: SandboxBackend) -> None:
    """Admission: FRESH needs a backend that can carry paths (SpecError otherwise)."""
    if spec.task.verify_mode is VerifyMode.FRESH and not _can_carry(backend, spec):
        why = (
            f"FRESH needs a sandbox backend that can make a verifier's sandbox from setup's "
            f"state ({backend.name} cannot here: e2b can, and the local backend on a server "
            "running as root); ask for AUTO or IN_PLACE"
        )
        raise SpecError([FieldViolation("spec.task.verify_mode", why)])
    if spec.task.verify_mode is VerifyMode.FRESH and task_workdir(spec.task) == "/":
        why = "FRESH carries the workdir into a new sandbox; a workdir of / is everything"
        raise SpecError([FieldViolation("spec.task.verify_mode", why)])


def verifier_dirs(spec: RolloutSpec) -> list[str]:
    """The verifier's own directories: the top directory of each nested verifier file
    (`tests/` of `tests/test.sh`, `/tests` of `/tests/test.sh`), made new and empty."""
    dirs = set()
    for key in spec.task.verifier_files:
        relative = key.lstrip("/")
        if "/" in relative:
            top = relative.split("/", 1)[0]
            dirs.add(f"/{top}" if key.startswith("/") else staged_path(spec.task, top))
    return sorted(dirs)


def verifier_sandbox_label(rollout_id: str) -> str:
    """The rollout label of a FRESH verifier's sandbox: the sweeps find it by this."""
    return f"{rollout_id}.verifier"


def _can_carry(backend: SandboxBackend, spec: RolloutSpec) -> bool:
    return isinstance(backend, PathCarrier) and backend.can_carry(spec.sandbox)


def _fresh(spec: RolloutSpec, backend: SandboxBackend) -> bool:
    """Whether this rollout verifies in a fresh sandbox (the module docstring)."""
    task = spec.task
    if task.verify_mode is VerifyMode.IN_PLACE or not (task.verify or task.verifier_files):
        return False
    return _can_carry(backend, spec) and task_workdir(task) != "/"


class Verification:
    """One rollout's verification: `after_setup`, then `verify` once, `close` always."""

    def __init__(
        self,
        spec: RolloutSpec,
        *,
        rollout_id: str,
        backend: SandboxBackend,
        prepared: PreparedFilesystem | None,
        timeout_s: float,
        publish: Callable[[EventPayload], None],
        on_result: Callable[[CommandResult], None],
    ) -> None:
        self._spec = spec
        self._rollout_id = rollout_id
        self._backend = backend
        self._prepared = prepared
        self._timeout_s = timeout_s
        self._publish = publish
        self._on_result = on_result
        self.fresh = _fresh(spec, backend)
        self._setup_state: Snapshot | None = None
        self._own_setup_state = False
        self._carried: Snapshot | None = None
        self._sandbox: Sandbox | None = None
        self._in_place_why = ""
        """Why an AUTO rollout the backend could verify FRESH is verified in place."""

    async def after_setup(self, sandbox: Sandbox) -> None:
        """Freeze what the verifier will run, before the agent can change it: setup's
        state (FRESH), or a seal of the system trees (IN_PLACE)."""
        if self.fresh and self._prepared is not None:
            self._setup_state = self._prepared.snapshot
        elif self.fresh:
            try:
                self._setup_state = await self._backend.snapshot(sandbox)
            except SandboxError as exc:
                if self._spec.task.verify_mode is not VerifyMode.AUTO:
                    raise
                self.fresh = False
                self._in_place_why = f" (setup's state could not be frozen: {exc})"
            else:
                self._own_setup_state = True
        if not self.fresh and isinstance(sandbox, SystemSeal):
            await sandbox.seal_system(exempt=[task_workdir(self._spec.task)])

    async def verify(self, agent_sandbox: Sandbox) -> VerifyOutcome:
        """Take the sandbox back from the agent, verify (module docstring), read the reward."""
        task = self._spec.task
        paths = {staged_path(task, key): key for key in task.verifier_files}
        fresh_dirs = [BYTECODE_DIR] if self.fresh else [BYTECODE_DIR, *verifier_dirs(self._spec)]
        for notice in await take_back(agent_sandbox, paths, fresh_dirs=fresh_dirs):
            self._publish(notice)
        if self.fresh:
            sandbox = await self._fresh_sandbox(agent_sandbox)
        else:
            sandbox = agent_sandbox
            if reasons := await self._tampering(sandbox):
                return VerifyOutcome([], None, _tampered(reasons))
            if opened := await open_verifier_network(sandbox, self._spec.sandbox):
                self._publish(opened)
            check = (
                "behind the integrity check"
                if isinstance(sandbox, SystemSeal)
                else "with no integrity check (its backend has none)"
            )
            self._publish(
                Notice(
                    topic="verifier.in_place",
                    message=f"verified in the agent's own sandbox, {check}{self._in_place_why}",
                )
            )
        await stage(sandbox, task, task.verifier_files)
        results = await run_commands(
            sandbox,
            task.verify,
            stage=CommandStage.VERIFY,
            timeout_s=self._timeout_s,
            env=task.env | task.verifier_env | VERIFIER_ENV,
            wrap=functools.partial(in_workdir, task.workdir),
            display=task.verify_display,
            on_result=self._on_result,
            stop_on_failure=False,
        )
        await sandbox.reclaim()
        return VerifyOutcome(results, await compute_reward(sandbox, results, task))

    async def _fresh_sandbox(self, agent_sandbox: Sandbox) -> Sandbox:
        """A new sandbox of setup's state with the agent's workdir carried in, its
        verifier directories new and empty."""
        assert isinstance(self._backend, PathCarrier)
        assert self._setup_state is not None
        carried = _outermost([task_workdir(self._spec.task), *self._spec.task.carried_paths])
        over = self._setup_state if self._own_setup_state else None
        self._carried = await self._backend.carry(agent_sandbox, carried, over=over)
        sandbox_spec = self._spec.sandbox.model_copy(
            update={"network": self._spec.sandbox.verifier_policy, "verifier_network": None}
        )
        request = SandboxRequest(
            rollout_id=verifier_sandbox_label(self._rollout_id),
            spec=sandbox_spec,
            lifetime_s=self._timeout_s * (len(self._spec.task.verify) + 1),
            snapshot=self._setup_state,
            carried=self._carried,
        )
        try:
            self._sandbox = await asyncio.wait_for(self._backend.create(request), _CREATE_TIMEOUT_S)
        except TimeoutError as exc:
            raise SandboxError(
                f"the verifier's sandbox was not created within {_CREATE_TIMEOUT_S:g}s"
            ) from exc
        await self._sandbox.reclaim(empty_dirs=[VERIFIER_DIR, *verifier_dirs(self._spec)])
        if opened := verifier_network_notice(self._spec.sandbox):
            self._publish(opened)
        self._publish(
            Notice(
                topic="verifier.fresh",
                message="verified in a new sandbox made from setup's state, with only "
                f"{', '.join(carried)} carried from the agent's",
            )
        )
        return self._sandbox

    async def _tampering(self, sandbox: Sandbox) -> list[str]:
        if not isinstance(sandbox, SystemSeal):
            return []
        task = self._spec.task
        diff = await sandbox.system_changes(path=(task.env | task.verifier_env).get("PATH"))
        return tampering(diff)

    async def close(self) -> None:
        """Kill the verifier's sandbox and free the layers it was made of; never raises."""
        if self._sandbox is not None:
            with contextlib.suppress(Exception):
                await self._sandbox.kill()
        owned = [self._carried, self._setup_state if self._own_setup_state else None]
        for snapshot in owned:
            if snapshot is not None:
                with contextlib.suppress(Exception):
                    await snapshot.release()


def _outermost(paths: Sequence[str]) -> list[str]:
    """The paths, without any that lies below another (it is carried with it)."""
    cleaned = sorted({path.rstrip("/") or "/" for path in paths})
    kept: list[str] = []
    for path in cleaned:
        if not any(path == top or path.startswith(f"{top.rstrip('/')}/") for top in kept):
            kept.append(path)
    return kept


def _tampered(reasons: list[str]) -> str:
    shown = first_of(reasons, _SHOWN_REASONS, "; ")
    return f"the agent changed what the verifier executes, so it was not run: {shown}"
