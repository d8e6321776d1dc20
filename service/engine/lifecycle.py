"""One rollout's life as an explicit phase machine.

QUEUED -> CREATING_SANDBOX -> PREPARING_AGENT -> SETUP -> AGENT -> VERIFYING -> COLLECTING ->
TEARDOWN. The rollout is one trace and each phase, QUEUED and TEARDOWN too, is timed and a
span; a failure is recorded on the result with its kind (never raised to the caller); only
cancellation propagates, and teardown runs on every path that made a sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from opentelemetry import trace

from service.agents import ORACLE, Agent, AgentContext, AgentOutcome
from service.config import Settings
from service.engine.collect import collect_workdir
from service.engine.output_cap import OutputCap
from service.engine.output_scrub import OutputScrubber
from service.engine.staging import make_workdir, stage, staged_path, task_workdir
from service.engine.template import PreparedFilesystem
from service.engine.validation import resolved_timeouts
from service.engine.verification import Verification
from service.errors import AgentInstallError, RolloutFailure, SandboxError, UpstreamError
from service.models import (
    CommandResult,
    CommandStage,
    ErrorKind,
    EventPayload,
    ModelAccess,
    Notice,
    Phase,
    PhaseChanged,
    Rollout,
    RolloutError,
    RolloutResult,
    RolloutSpec,
    RolloutStatus,
    Turn,
)
from service.proxy import CallGate, CallTally, SlotLease, scrub_text
from service.sandboxes import Sandbox, SandboxBackend, SandboxRequest, in_workdir
from service.telemetry import Metrics
from service.verifier import run_commands

__all__ = ["ModelAttachment", "RolloutRun", "Slot"]

log = logging.getLogger(__name__)
tracer = trace.get_tracer("rollout-service")

_SANDBOX_CREATE_TIMEOUT_S = 600.0
_AGENT_PROVISION_TIMEOUT_S = 900.0
_TEARDOWN_TIMEOUT_S = 60.0


T = TypeVar("T")


@dataclass(frozen=True)
class ModelAttachment:
    """How the agent reaches the model, and the captured calls' tally (None: not captured)."""

    access: ModelAccess
    calls: CallTally | None
    secrets: tuple[str, ...] = ()
    """What the agent was handed that must never be published (a route token, a key)."""
    gate: CallGate | None = None
    """The route's pause and policy-version gate (the service's proxy only)."""


AttachModel = Callable[
    [Sandbox, Callable[[Turn], None]], contextlib.AbstractAsyncContextManager[ModelAttachment]
]
"""Opens model access for one sandbox (a proxy route, or direct access) for the agent's life."""
Slot = Callable[[], contextlib.AbstractAsyncContextManager[SlotLease | None]]
"""Holds one of the server's running slots for the body; waiting for it is the QUEUED phase.
The lease it gives (None: the slot is held throughout) lets the agent's paused model calls
give the slot back while they wait (`engine.admission.RunningSlot`)."""
BuildImage = Callable[[RolloutSpec, Callable[[str], None]], Awaitable[None]]
"""Makes the image the spec's sandbox runs on when the service builds it (a Harbor task's),
reporting progress; raises SandboxError."""


class RolloutRun:
    """Drives one rollout through its phases, publishing every step as an event."""

    def __init__(
        self,
        rollout: Rollout,
        spec: RolloutSpec,
        *,
        settings: Settings,
        backend: SandboxBackend,
        agent: Agent,
        attach_model: AttachModel | None,
        publish: Callable[[EventPayload], None],
        prepared: PreparedFilesystem | None = None,
        build_image: BuildImage | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.rollout = rollout
        self._spec = spec
        self._settings = settings
        self._backend = backend
        self._agent = agent
        self._attach_model = attach_model
        self._publish = publish
        self._prepared = prepared
        """A group member's (or session copy's) filesystem, set up once (`engine.template`)."""
        self._build_image = build_image
        self._metrics = metrics or Metrics()
        self._sandbox: Sandbox | None = None
        self._attachment: ModelAttachment | None = None
        self._lease: SlotLease | None = None
        self._agent_timeout_s, self._command_timeout_s, self._verify_timeout_s = resolved_timeouts(
            spec, settings
        )
        self._verification = Verification(
            spec,
            rollout_id=rollout.id,
            backend=backend,
            prepared=prepared,
            timeout_s=self._verify_timeout_s,
            publish=publish,
            on_result=functools.partial(_command_event, publish, CommandStage.VERIFY),
        )

    async def execute(self, slot: Slot) -> Rollout:
        """Wait for a running slot (QUEUED), then run every phase in it; always ends with a
        terminal status, and with the sandbox killed if one was made. The whole is one trace:
        a cancel while queued ends it too."""
        with tracer.start_as_current_span("rollout", attributes=self._span_attributes()):
            try:
                async with contextlib.AsyncExitStack() as held:
                    self._lease = await self._queued(held.enter_async_context(slot()))
                    await self._run()
            except asyncio.CancelledError:  # while queued: nothing ran, nothing to tear down
                self._cancelled()
            self._finish()
        return self.rollout

    async def _queued(self, slot: Awaitable[T]) -> T:
        began = time.monotonic()
        try:
            with tracer.start_as_current_span(f"phase.{Phase.QUEUED.value}"):
                return await slot
        finally:  # a rollout cancelled while queued waited too (the longest waits)
            self._timed(Phase.QUEUED, time.monotonic() - began)

    async def _run(self) -> None:
        started = time.monotonic()
        self.rollout.status = RolloutStatus.RUNNING
        self.rollout.start_time = datetime.now(UTC)
        try:
            await self._phases()
        except RolloutFailure as failure:
            self._fail(failure.kind, str(failure))
        except asyncio.CancelledError:
            self._cancelled()
        except Exception as exc:
            log.exception("rollout %s crashed", self.rollout.id)
            self._fail(ErrorKind.INTERNAL, f"{type(exc).__name__}: {exc}")
        finally:
            await self._teardown()
        self.rollout.result.timings.total_s = time.monotonic() - started

    def _cancelled(self) -> None:
        self._fail(ErrorKind.CANCELLED, "cancelled")
        # The rollout owns this task: having recorded the cancel, it finishes normally.
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()

    async def _phases(self) -> None:
        self._sandbox = await self._phase(Phase.CREATING_SANDBOX, self._create_sandbox())
        sandbox = self._sandbox
        async with contextlib.AsyncExitStack() as stack:  # model access ends with the agent
            context = await self._phase(Phase.PREPARING_AGENT, self._prepare_agent(sandbox, stack))
            if not await self._phase(Phase.SETUP, self._setup(sandbox)):
                return
            await self._verification.after_setup(sandbox)
            await self._phase(Phase.AGENT, self._run_agent(sandbox, context))
        await self._phase(Phase.VERIFYING, self._verify(sandbox))
        await self._phase(Phase.COLLECTING, self._collect(sandbox))

    async def _phase(self, phase: Phase, work: Awaitable[T]) -> T:
        self._enter(phase)
        began = time.monotonic()
        try:
            with tracer.start_as_current_span(f"phase.{phase.value}"):
                return await work
        finally:
            self._timed(phase, time.monotonic() - began)

    def _timed(self, phase: Phase, seconds: float) -> None:
        setattr(self.rollout.result.timings, f"{phase.value}_s", seconds)
        self._metrics.phase_ended(phase.value, agent=self._agent.name, seconds=seconds)

    def _enter(self, phase: Phase, message: str = "") -> None:
        self.rollout.phase = phase
        self._publish(PhaseChanged(phase=phase, status=self.rollout.status, message=message))

    async def _create_sandbox(self) -> Sandbox:
        await self._provision_agent()
        if self._build_image is not None:
            await self._build_image(
                self._spec, lambda message: self._enter(Phase.CREATING_SANDBOX, message)
            )
        request = SandboxRequest(
            rollout_id=self.rollout.id,
            spec=self._spec.sandbox,
            lifetime_s=self._lifetime_s(),
            on_progress=lambda message: self._enter(Phase.CREATING_SANDBOX, message),
            snapshot=None if self._prepared is None else self._prepared.snapshot,
            verifier_follows=self._verification.fresh,
            agent=self._agent.name,
        )
        try:
            sandbox = await asyncio.wait_for(
                self._backend.create(request), _SANDBOX_CREATE_TIMEOUT_S
            )
        except TimeoutError as exc:
            raise SandboxError(
                f"sandbox not created within {_SANDBOX_CREATE_TIMEOUT_S:g}s"
            ) from exc
        self.rollout.result.sandbox_id = sandbox.id
        return sandbox

    async def _provision_agent(self) -> None:
        """Install the agent where the sandbox will see it, before the sandbox exists."""

        def progress(message: str) -> None:
            self._enter(Phase.CREATING_SANDBOX, message)

        try:
            async with asyncio.timeout(_AGENT_PROVISION_TIMEOUT_S):
                await self._agent.provision(self._backend.capabilities, progress)
        except TimeoutError as exc:
            raise AgentInstallError(
                f"installing the {self._agent.name} agent took over {_AGENT_PROVISION_TIMEOUT_S:g}s"
            ) from exc

    def _lifetime_s(self) -> float:
        task = self._spec.task
        return (
            self._agent_timeout_s
            + len(task.setup) * self._command_timeout_s
            + len(task.verify) * self._verify_timeout_s
        )

    async def _prepare_agent(
        self, sandbox: Sandbox, stack: contextlib.AsyncExitStack
    ) -> AgentContext:
        model: ModelAccess | None = None
        if self._attach_model is not None:
            self._attachment = await stack.enter_async_context(
                self._attach_model(sandbox, self._on_turn)
            )
            model = self._attachment.access
        context = AgentContext(
            rollout_id=self.rollout.id,
            instruction=self._spec.task.instruction,
            command=self._spec.agent.command,
            options=self._spec.agent.options,
            timeout_s=self._agent_timeout_s,
            model=model,
            env=self._spec.task.env,
            workdir=self._spec.task.workdir,
            solution_env=self._spec.task.env | self._spec.task.solution_env,
        )
        await self._agent.prepare(sandbox, context)
        return context

    def _on_turn(self, turn: Turn) -> None:
        self._metrics.turn(turn)
        self.rollout.result.turns.append(turn)
        _note_versions(self.rollout.result, turn)
        self._publish(turn)

    async def _setup(self, sandbox: Sandbox) -> bool:
        task = self._spec.task
        if self._prepared is not None:  # the sandbox started from the group's snapshot
            results = list(self._prepared.setup_results)
            for result in results:
                self._publish(result)
            self.rollout.result.setup_results = results
        else:
            await make_workdir(sandbox, task)
            await stage(sandbox, task, task.files)
            results = await self._commands(sandbox, task.setup, CommandStage.SETUP)
            self.rollout.result.setup_results = results
            failed = next((r for r in results if not r.passed), None)
            if failed is not None:
                detail = "timed out" if failed.timed_out else f"exit {failed.exit_code}"
                self._fail(ErrorKind.SETUP, f"setup[{failed.index}] failed ({detail})")
                return False
        if self._agent.name == ORACLE:  # the reference solution reaches the oracle only
            await stage(sandbox, task, task.solution_files, solution=True)
        return True

    async def _commands(
        self, sandbox: Sandbox, commands: tuple[str, ...], stage: CommandStage
    ) -> list[CommandResult]:
        task = self._spec.task
        return await run_commands(
            sandbox,
            commands,
            stage=stage,
            timeout_s=self._command_timeout_s,
            env=task.env,
            wrap=functools.partial(in_workdir, task.workdir),
            on_result=functools.partial(_command_event, self._publish, stage),
            stop_on_failure=True,
        )

    async def _run_agent(self, sandbox: Sandbox, context: AgentContext) -> None:
        cap = OutputCap(
            self._publish,
            limit_bytes=self._settings.agent_output_event_bytes,
            tail_bytes=self._settings.agent_log_tail_bytes,
        )
        scrubber = OutputScrubber(cap, () if self._attachment is None else self._attachment.secrets)
        gate = None if self._attachment is None else self._attachment.gate
        paused_before = 0.0 if gate is None else gate.paused_s()
        if gate is not None:  # time paused is not the agent's, up to the credit: its deadline
            credit_s = self._settings.pause_credit_max_s  # moves by it, and then holds
            context = dataclasses.replace(
                context, paused_s=lambda: min(gate.paused_s() - paused_before, credit_s)
            )
        if gate is not None:  # its calls all paused, the agent gives its running slot back
            gate.lease = self._lease
        try:
            outcome = await self._unless_refused(self._agent.run(sandbox, context, scrubber))
        finally:
            scrubber.flush()
            if gate is not None:
                gate.lease = None
                self.rollout.result.timings.paused_s = gate.paused_s() - paused_before
        if self._lease is not None:  # the agent timed out paused: verify in a slot again
            await self._lease.reacquire()
        result = self.rollout.result
        result.agent_exit_code = outcome.exit_code
        result.agent_log_tail = scrub_text(outcome.log_tail or cap.tail(), scrubber.secrets)[
            -self._settings.agent_log_tail_bytes :
        ]
        calls = None if self._attachment is None else self._attachment.calls
        if calls is not None:
            result.trainable_calls, result.trainable_calls_failed = (
                calls.trainable,
                calls.trainable_failed,
            )
            if calls.all_failed:
                raise UpstreamError(
                    "every trainable model call failed upstream; see the turns' upstream_error"
                )
        if outcome.timed_out:
            self.rollout.status = RolloutStatus.TIMED_OUT
            self._record(ErrorKind.AGENT_TIMEOUT, self._agent_timeout_message())

    async def _unless_refused(self, run: Coroutine[None, None, AgentOutcome]) -> AgentOutcome:
        """The agent's outcome; but should the endpoint refuse its first calls (a wrong
        endpoint: `CallTally.refused`), the agent is stopped at once and the rollout fails
        UPSTREAM_LLM with the upstream's answer, instead of waiting out its timeout."""
        calls = None if self._attachment is None else self._attachment.calls
        if calls is None:
            return await run
        gate = self._attachment.gate if self._attachment is not None else None
        agent = asyncio.ensure_future(run)
        refused = asyncio.ensure_future(calls.refused.wait())
        stale = asyncio.ensure_future(gate.stale.wait() if gate is not None else asyncio.Future())
        try:
            await asyncio.wait({agent, refused, stale}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            refused.cancel()
            stale.cancel()
            if not agent.done():
                agent.cancel()  # kills the agent's processes (`wait_or_kill`)
                with contextlib.suppress(asyncio.CancelledError):
                    await agent
        if agent.cancelled() and gate is not None and gate.stale.is_set():
            lag = f"{gate.version} against {gate.oldest}, max_policy_lag {gate.max_lag}"
            raise RolloutFailure(
                f"a model call would have started beyond the policy lag bound ({lag}), so the "
                "agent was stopped and the rollout not verified",
                kind=ErrorKind.POLICY_STALE,
            )
        if agent.cancelled():
            raise UpstreamError(
                f"the model endpoint refused the agent's first call, so the agent was stopped: "
                f"{calls.refusal}"
            )
        return agent.result()

    async def _verify(self, sandbox: Sandbox) -> None:
        """Verify (`engine.verification`); record the reward, or the tampering found."""
        outcome = await self._verification.verify(sandbox)
        result = self.rollout.result
        result.verify_results = outcome.results
        if outcome.reward is None:  # the agent changed what the verifier executes: scored 0
            self._publish(Notice(topic="verifier.tampered", message=outcome.tampered))
            result.reward = 0.0
            result.error = RolloutError(kind=ErrorKind.TAMPERED, message=outcome.tampered)
            self.rollout.status = RolloutStatus.FAILED
            return
        if outcome.reward.note:
            self._publish(Notice(topic="verifier.reward_unset", message=outcome.reward.note))
        result.reward = outcome.reward.value
        result.metrics = outcome.reward.metrics
        result.reward_key = outcome.reward.key

    async def _collect(self, sandbox: Sandbox) -> None:
        task = self._spec.task
        workdir = task_workdir(task)
        if workdir == "/":  # the whole image is no result: nothing is collected
            return
        collected = await collect_workdir(
            sandbox,
            self._settings,
            workdir=workdir,
            skip_dirs=self._agent.state_dirs,
            exclude={
                path.removeprefix(f"{workdir}/")
                for path in map(functools.partial(staged_path, task), task.verifier_files)
            },
        )
        self.rollout.result.files = collected.files
        self.rollout.result.files_omitted = collected.omitted

    async def _teardown(self) -> None:
        self._enter(Phase.TEARDOWN)
        began = time.monotonic()
        with (
            tracer.start_as_current_span(f"phase.{Phase.TEARDOWN.value}"),
            contextlib.suppress(Exception),
        ):
            await asyncio.shield(asyncio.wait_for(self._kill_sandboxes(), _TEARDOWN_TIMEOUT_S))
        self._timed(Phase.TEARDOWN, time.monotonic() - began)

    async def _kill_sandboxes(self) -> None:
        """The verifier's sandbox and its layers, then the agent's."""
        await self._verification.close()
        if self._sandbox is not None:
            await self._sandbox.kill()

    def _agent_timeout_message(self) -> str:
        message = f"agent killed at {self._agent_timeout_s:g}s"
        credit_s = self._settings.pause_credit_max_s
        charged_s = self.rollout.result.timings.paused_s - credit_s
        if charged_s <= 0:
            return message
        return (
            f"{message}, counting {charged_s:.1f}s its model calls were paused beyond the "
            f"{credit_s:g}s not charged (ROLLOUT_PAUSE_CREDIT_MAX_S)"
        )

    def _record(self, kind: ErrorKind, message: str) -> None:
        if self.rollout.result.error is None:
            self.rollout.result.error = RolloutError(kind=kind, message=message)

    def _fail(self, kind: ErrorKind, message: str) -> None:
        if kind is ErrorKind.CANCELLED:
            self.rollout.result.error = RolloutError(kind=kind, message=message)
            self.rollout.status = RolloutStatus.CANCELLED
            return
        self._record(kind, message)
        # A timed-out agent stays TIMED_OUT even if its partial work cannot be scored.
        if self.rollout.status is not RolloutStatus.TIMED_OUT or kind is not ErrorKind.VERIFIER:
            self.rollout.status = RolloutStatus.FAILED

    def _finish(self) -> None:
        if self.rollout.status is RolloutStatus.RUNNING:
            self.rollout.status = RolloutStatus.SUCCEEDED
        self.rollout.phase = Phase.DONE
        self.rollout.finish_time = datetime.now(UTC)
        span = trace.get_current_span()
        span.set_attribute("rollout.status", self.rollout.status.value)
        if self.rollout.result.reward is not None:
            span.set_attribute("rollout.reward", self.rollout.result.reward)

    def _span_attributes(self) -> dict[str, str]:
        return {
            "rollout.id": self.rollout.id,
            "rollout.task_id": self._spec.task_id,
            "rollout.agent": self._spec.agent.name,
            "rollout.backend": self._spec.sandbox.backend or self._settings.default_backend,
        }


def _command_event(
    publish: Callable[[EventPayload], None], stage: CommandStage, result: CommandResult
) -> None:
    """A command's result as an event and on the current span. A function, not a method:
    the run's `Verification` holds it, and a bound method would make the two a cycle that
    keeps a spec's files alive until a full collection."""
    span = trace.get_current_span()
    span.add_event(
        f"{stage.value}.command",
        {"index": result.index, "exit_code": result.exit_code, "timed_out": result.timed_out},
    )
    publish(result)


def _note_versions(result: RolloutResult, turn: Turn) -> None:
    """Widen the rollout's oldest..newest policy versions to the turn's."""
    for version in (turn.policy_version_start, turn.policy_version_end):
        if version is not None:
            result.policy_version_min = min(result.policy_version_min or version, version)
            result.policy_version_max = max(result.policy_version_max or version, version)
