"""The phase machine (`RolloutRun`) on an in-memory sandbox: every way a rollout ends.

Each path is checked for its status and error kind, and for teardown: the sandbox (when
one was made) killed exactly once and the running slot given back. No server, no bwrap:
the sandbox is `tests.fakes.memory_sandbox`, the agent the real `command` harness.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn

import pytest

from service.agents.base import AgentContext, Progress
from service.agents.command import CommandAgent
from service.config import Settings
from service.engine import lifecycle
from service.engine.lifecycle import RolloutRun
from service.errors import AgentError, SandboxError
from service.models import (
    AgentSpec,
    CommandStage,
    ErrorKind,
    EventPayload,
    ModelAccess,
    Phase,
    PhaseChanged,
    RewardSource,
    Rollout,
    RolloutSpec,
    RolloutStatus,
    TaskSpec,
    Turn,
)
from service.proxy import CallGate, CallTally
from service.sandboxes import SystemDiff, SystemSeal
from service.sandboxes.base import (
    REWARD_JSON,
    REWARD_TXT,
    WORKDIR,
    Capabilities,
    ExecResult,
    Sandbox,
    SandboxRequest,
)
from testing.fakes.memory_sandbox import Handler, Hook, MemoryBackend, MemorySandbox, exited

Reply = int | ExecResult | Callable[[MemorySandbox], Awaitable[int]]
"""How a scripted command ends: an exit code, a result, or something it does first."""


def _script(replies: Mapping[str, Reply]) -> Handler:
    """A handler answering each command by the first key it contains; others exit 0."""

    async def handler(sandbox: MemorySandbox, command: str) -> int | ExecResult:
        for key, reply in replies.items():
            if key in command:
                return await reply(sandbox) if callable(reply) else reply
        return 0

    return handler


def _writes(path: str, data: bytes, code: int = 0) -> Callable[[MemorySandbox], Awaitable[int]]:
    async def reply(sandbox: MemorySandbox) -> int:
        sandbox.files[path] = data
        return code

    return reply


async def _forever(*_: object) -> NoReturn:
    await asyncio.sleep(3600)
    raise AssertionError("what the test held was never stopped")


class _Slot:
    """The run's running slot: counts who holds it; `closed` keeps the run QUEUED."""

    def __init__(self, *, closed: bool = False) -> None:
        self._open = asyncio.Event()
        if not closed:
            self._open.set()
        self.held = 0
        self.taken = 0

    @contextlib.asynccontextmanager
    async def __call__(self) -> AsyncIterator[None]:
        await self._open.wait()
        self.taken += 1
        self.held += 1
        try:
            yield
        finally:
            self.held -= 1


class _Agent(CommandAgent):
    """The command harness, with its install and preparation scripted (the harness steps
    that reach no sandbox command of a command agent's)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.provisioning: Hook | None = None
        self.preparing: Callable[[], Awaitable[None]] | None = None

    async def provision(self, backend: Capabilities, progress: Progress) -> None:
        if self.provisioning is not None:
            await self.provisioning("provision")

    async def prepare(self, sandbox: Sandbox, context: AgentContext) -> None:
        if self.preparing is not None:
            await self.preparing()


def _spec(
    *,
    setup: tuple[str, ...] = ("setup-step",),
    verify: tuple[str, ...] = ("verify-step",),
    reward_source: RewardSource = RewardSource.AUTO,
    agent_timeout_s: float | None = None,
    command_timeout_s: float | None = None,
    verify_timeout_s: float | None = None,
) -> RolloutSpec:
    task = TaskSpec(
        instruction="solve it",
        setup=setup,
        verify=verify,
        files={"task.txt": b"the task"},
        verifier_files={"tests/test.sh": b"exit 0"},
        reward_source=reward_source,
    )
    agent = AgentSpec(name="command", command="agent-step")
    return RolloutSpec(
        task=task,
        agent=agent,
        agent_timeout_s=agent_timeout_s,
        command_timeout_s=command_timeout_s,
        verify_timeout_s=verify_timeout_s,
    )


class _Rollout:
    """One run of the phase machine on a memory backend, and what it published."""

    def __init__(
        self,
        spec: RolloutSpec,
        replies: Mapping[str, Reply] | None = None,
        *,
        hook: Hook | None = None,
        slot: _Slot | None = None,
        attach_model: lifecycle.AttachModel | None = None,
        backend: MemoryBackend | None = None,
    ) -> None:
        settings = Settings()
        self.backend = backend or MemoryBackend(_script(replies or {}), hook)
        self.agent = _Agent(settings)
        self.slot = slot or _Slot()
        self.events: list[EventPayload] = []
        self._entered: dict[Phase, asyncio.Event] = collections.defaultdict(asyncio.Event)
        rollout = Rollout(id="r1", spec=spec, create_time=datetime.now(UTC))
        self.run = RolloutRun(
            rollout,
            spec,
            settings=settings,
            backend=self.backend,
            agent=self.agent,
            attach_model=attach_model,
            publish=self._publish,
        )
        self.task: asyncio.Task[Rollout] | None = None

    def _publish(self, payload: EventPayload) -> None:
        self.events.append(payload)
        if isinstance(payload, PhaseChanged):
            self._entered[payload.phase].set()

    def start(self) -> None:
        self.task = asyncio.create_task(self.run.execute(self.slot))

    async def result(self) -> Rollout:
        if self.task is None:
            self.start()
        assert self.task is not None
        async with asyncio.timeout(10):
            rollout = await self.task
        assert self.slot.held == 0, "the running slot was not given back"
        kills = [sandbox.kills for sandbox in self.backend.sandboxes]
        assert kills == [1] * len(kills), "a sandbox was not killed exactly once"
        assert rollout.phase is Phase.DONE
        assert rollout.finish_time is not None
        return rollout

    async def reach(self, phase: Phase) -> None:
        """Wait until the run has entered `phase`."""
        async with asyncio.timeout(5):
            await self._entered[phase].wait()

    @property
    def sandbox(self) -> MemorySandbox:
        [sandbox] = self.backend.sandboxes
        return sandbox

    def phases(self) -> list[Phase]:
        entered = [e.phase for e in self.events if isinstance(e, PhaseChanged)]
        return [phase for i, phase in enumerate(entered) if i == 0 or entered[i - 1] != phase]


def _error(rollout: Rollout) -> tuple[RolloutStatus, ErrorKind | None]:
    error = rollout.result.error
    return rollout.status, None if error is None else error.kind


async def test_a_rollout_runs_every_phase_in_order_and_tears_down_once() -> None:
    replies = {"verify-step": _writes(REWARD_TXT, b"0.75\n")}
    run = _Rollout(_spec(), replies)
    rollout = await run.result()
    assert _error(rollout) == (RolloutStatus.SUCCEEDED, None)
    assert rollout.result.reward == 0.75
    assert run.phases() == [
        Phase.CREATING_SANDBOX,
        Phase.PREPARING_AGENT,
        Phase.SETUP,
        Phase.AGENT,
        Phase.VERIFYING,
        Phase.COLLECTING,
        Phase.TEARDOWN,
    ]
    commands = run.sandbox.commands
    assert [c for c in commands if c.endswith("-step")] == [
        "setup-step",
        "agent-step",
        "verify-step",
    ]
    assert run.sandbox.kills == 1
    assert run.slot.taken == 1
    assert list(rollout.result.files) == ["task.txt"], "verifier files are not collected"
    assert rollout.result.agent_exit_code == 0
    assert rollout.result.sandbox_id == "memory-0"


async def test_verifier_files_arrive_only_after_the_agent() -> None:
    seen: dict[str, bool] = {}

    async def agent(sandbox: MemorySandbox) -> int:
        seen["agent"] = f"{WORKDIR}/tests/test.sh" in sandbox.files
        return 0

    async def verify(sandbox: MemorySandbox) -> int:
        seen["verify"] = f"{WORKDIR}/tests/test.sh" in sandbox.files
        return 0

    await _Rollout(_spec(), {"agent-step": agent, "verify-step": verify}).result()
    assert seen == {"agent": False, "verify": True}


async def test_a_sandbox_that_cannot_be_made_fails_sandbox_with_nothing_to_kill() -> None:
    async def hook(call: str) -> None:
        if call == "create":
            raise SandboxError("no room on the host")

    run = _Rollout(_spec(), hook=hook)
    rollout = await run.result()
    assert _error(rollout) == (RolloutStatus.FAILED, ErrorKind.SANDBOX)
    assert rollout.result.error is not None
    assert "no room" in rollout.result.error.message
    assert run.backend.sandboxes == []
    assert run.phases()[-1] is Phase.TEARDOWN


async def test_a_failing_setup_command_stops_before_the_agent() -> None:
    run = _Rollout(_spec(setup=("setup-step", "setup-two")), {"setup-step": exited(3, stderr="no")})
    rollout = await run.result()
    assert _error(rollout) == (RolloutStatus.FAILED, ErrorKind.SETUP)
    assert rollout.result.error is not None
    assert rollout.result.error.message == "setup[0] failed (exit 3)"
    assert [c for c in run.sandbox.commands if c.endswith(("-step", "-two"))] == ["setup-step"]
    assert [r.stage for r in rollout.result.setup_results] == [CommandStage.SETUP]
    assert Phase.AGENT not in run.phases()
    assert run.sandbox.kills == 1


async def test_a_setup_command_past_its_timeout_fails_setup() -> None:
    run = _Rollout(_spec(command_timeout_s=0.05), {"setup-step": _forever})
    rollout = await run.result()
    assert _error(rollout) == (RolloutStatus.FAILED, ErrorKind.SETUP)
    assert rollout.result.error is not None
    assert rollout.result.error.message == "setup[0] failed (timed out)"
    assert run.sandbox.kills == 1


async def test_an_agent_that_exits_non_zero_is_still_verified_and_scored() -> None:
    run = _Rollout(_spec(), {"agent-step": exited(1), "verify-step": exited(1)})
    rollout = await run.result()
    assert _error(rollout) == (RolloutStatus.SUCCEEDED, None)
    assert rollout.result.agent_exit_code == 1
    assert rollout.result.reward == 0.0, "a failed verify command of one scores 0/1"


async def test_an_agent_that_cannot_be_prepared_fails_agent_unverified() -> None:
    run = _Rollout(_spec())

    async def fail() -> None:
        raise AgentError("the harness's config could not be written")

    run.agent.preparing = fail
    rollout = await run.result()
    assert _error(rollout) == (RolloutStatus.FAILED, ErrorKind.AGENT)
    assert not any(c.endswith("-step") for c in run.sandbox.commands)
    assert run.sandbox.kills == 1


async def test_an_agent_past_its_timeout_is_killed_timed_out_and_still_verified() -> None:
    replies = {"agent-step": _forever, "verify-step": _writes(REWARD_TXT, b"0.5")}
    run = _Rollout(_spec(agent_timeout_s=0.05), replies)
    rollout = await run.result()
    assert _error(rollout) == (RolloutStatus.TIMED_OUT, ErrorKind.AGENT_TIMEOUT)
    assert rollout.result.error is not None
    assert rollout.result.error.message == "agent killed at 0.05s"
    assert rollout.result.reward == 0.5, "its partial work is scored"
    assert run.sandbox.kills == 1


def _counted_by(tally: CallTally, gate: CallGate | None = None) -> lifecycle.AttachModel:
    """Model access whose captured calls `tally` counts, behind `gate`, as a route's are."""

    @contextlib.asynccontextmanager
    async def attach(
        sandbox: Sandbox, on_turn: Callable[[Turn], None]
    ) -> AsyncIterator[lifecycle.ModelAttachment]:
        access = ModelAccess(
            base_url="http://route.invalid/v1", api_key="route-token", model="m", small_model="m"
        )
        yield lifecycle.ModelAttachment(access=access, calls=tally, gate=gate)

    return attach


def _calls(tally: CallTally, *statuses: int, then: Reply = 0) -> Reply:
    """The agent's step: model calls answered with `statuses`, then `then`."""

    async def reply(sandbox: MemorySandbox) -> int:
        for index, status in enumerate(statuses):
            turn = Turn(index=index, upstream_status=status, upstream_error=f"HTTP {status}")
            tally.add(turn, upstream_failed=status >= 400)
        if callable(then):
            return await then(sandbox)
        assert isinstance(then, int)
        return then

    return reply


async def test_an_endpoint_that_refuses_the_first_call_stops_the_agent_upstream_llm() -> None:
    tally = CallTally()
    replies = {"agent-step": _calls(tally, 401, then=_forever)}
    run = _Rollout(_spec(agent_timeout_s=30), replies, attach_model=_counted_by(tally))
    rollout = await run.result()  # at once, not at the agent's timeout
    assert _error(rollout) == (RolloutStatus.FAILED, ErrorKind.UPSTREAM_LLM)
    assert rollout.result.error is not None
    assert "refused the agent's first call" in rollout.result.error.message
    assert "HTTP 401" in rollout.result.error.message
    assert "verify-step" not in run.sandbox.commands, "an infrastructure failure is not scored"


async def test_every_trainable_call_failing_upstream_fails_upstream_llm_unscored() -> None:
    tally = CallTally()
    replies = {"agent-step": _calls(tally, 200, 500, 503)}
    run = _Rollout(_spec(), replies, attach_model=_counted_by(tally))
    rollout = await run.result()
    assert _error(rollout) == (RolloutStatus.SUCCEEDED, None), "one call went through"

    tally = CallTally()
    replies = {"agent-step": _calls(tally, 500, 503)}
    run = _Rollout(_spec(), replies, attach_model=_counted_by(tally))
    rollout = await run.result()
    assert _error(rollout) == (RolloutStatus.FAILED, ErrorKind.UPSTREAM_LLM)
    assert rollout.result.reward is None
    assert (rollout.result.trainable_calls, rollout.result.trainable_calls_failed) == (2, 2)
    assert "verify-step" not in run.sandbox.commands


async def test_a_call_beyond_the_policy_lag_stops_the_agent_policy_stale() -> None:
    gate = CallGate(version=1, max_lag=1)

    async def beyond_the_lag(sandbox: MemorySandbox) -> int:
        gate.oldest, gate.version = 1, 3  # the trainer moved on twice since the first call
        gate.stale.set()  # as the gate does when it refuses the next call (test_gate.py)
        return await _forever()

    replies = {"agent-step": beyond_the_lag}
    run = _Rollout(_spec(agent_timeout_s=30), replies, attach_model=_counted_by(CallTally(), gate))
    rollout = await run.result()  # at once, not at the agent's timeout
    assert _error(rollout) == (RolloutStatus.FAILED, ErrorKind.POLICY_STALE)
    assert rollout.result.error is not None
    assert "3 against 1, max_policy_lag 1" in rollout.result.error.message
    assert rollout.result.reward is None
    assert "verify-step" not in run.sandbox.commands, "a stale rollout is not scored"


class _Sealing(MemorySandbox):
    """A sandbox that seals its system trees (an image sandbox's integrity check): after the
    agent it reports `diff`."""

    def __init__(self, *args: Any, diff: SystemDiff) -> None:
        super().__init__(*args)
        self.sealed = False
        self.diff = diff

    async def seal_system(self, *, exempt: Sequence[str] = ()) -> None:
        self.sealed = True

    async def system_changes(self, *, path: str | None = None) -> SystemDiff:
        assert self.sealed, "the system trees were never sealed"
        return self.diff


class _SealingBackend(MemoryBackend):
    def __init__(self, handler: Handler, diff: SystemDiff) -> None:
        super().__init__(handler)
        self.diff = diff

    async def create(self, request: SandboxRequest) -> MemorySandbox:
        self.requests.append(request)
        sandbox = _Sealing(
            f"memory-{len(self.sandboxes)}", self._handler, self._hook, diff=self.diff
        )
        self.sandboxes.append(sandbox)
        return sandbox


async def test_an_agent_that_changed_what_the_verifier_runs_is_tampered_unverified() -> None:
    replies = {"verify-step": _writes(REWARD_TXT, b"1")}
    for diff, ends in [
        (SystemDiff(changes=()), (RolloutStatus.SUCCEEDED, None)),
        (SystemDiff(changes=(), complete=False), (RolloutStatus.FAILED, ErrorKind.TAMPERED)),
    ]:
        run = _Rollout(_spec(), backend=_SealingBackend(_script(replies), diff))
        rollout = await run.result()
        assert isinstance(run.sandbox, SystemSeal)
        assert _error(rollout) == ends
        if ends[1] is ErrorKind.TAMPERED:
            assert rollout.result.reward == 0.0
            assert "verify-step" not in run.sandbox.commands, "the verifier never ran"
            assert rollout.result.error is not None
            assert "more entries in the system trees" in rollout.result.error.message
        else:
            assert rollout.result.reward == 1.0


async def test_an_agent_install_past_its_timeout_fails_agent_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lifecycle, "_AGENT_PROVISION_TIMEOUT_S", 0.05)
    run = _Rollout(_spec())
    run.agent.provisioning = _forever
    rollout = await run.result()
    assert _error(rollout) == (RolloutStatus.FAILED, ErrorKind.AGENT_INSTALL)
    assert run.backend.requests == [], "no sandbox is asked for before the agent is installed"


async def test_a_sandbox_not_made_in_time_fails_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle, "_SANDBOX_CREATE_TIMEOUT_S", 0.05)

    async def hook(call: str) -> None:
        if call == "create":
            await _forever(call)

    rollout = await _Rollout(_spec(), hook=hook).result()
    assert _error(rollout) == (RolloutStatus.FAILED, ErrorKind.SANDBOX)
    assert rollout.result.error is not None
    assert rollout.result.error.message == "sandbox not created within 0.05s"


async def test_a_verify_command_past_its_timeout_scores_it_failed() -> None:
    run = _Rollout(
        _spec(verify=("verify-step", "verify-two"), verify_timeout_s=0.05),
        {
            "verify-step": _forever,
        },
    )
    rollout = await run.result()
    assert _error(rollout) == (RolloutStatus.SUCCEEDED, None)
    assert [r.timed_out for r in rollout.result.verify_results] == [True, False]
    assert rollout.result.reward == 0.5, "one of two verify commands passed"


async def test_a_teardown_that_hangs_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle, "_TEARDOWN_TIMEOUT_S", 0.05)

    async def hook(call: str) -> None:
        if call == "kill":
            await _forever(call)

    run = _Rollout(_spec(verify=()), hook=hook)
    rollout = await run.result()
    assert _error(rollout) == (RolloutStatus.SUCCEEDED, None)
    assert run.sandbox.kills == 1


async def test_a_crash_in_a_phase_fails_internal_and_still_tears_down() -> None:
    async def crash(_: MemorySandbox) -> int:
        raise RuntimeError("a bug")

    run = _Rollout(_spec(), {"setup-step": crash})
    rollout = await run.result()
    assert _error(rollout) == (RolloutStatus.FAILED, ErrorKind.INTERNAL)
    assert rollout.result.error is not None
    assert rollout.result.error.message == "RuntimeError: a bug"
    assert run.sandbox.kills == 1


@pytest.mark.parametrize(
    ("verifier_writes", "source", "reward", "metrics"),
    [
        pytest.param({REWARD_TXT: b" 1.0\n"}, RewardSource.AUTO, 1.0, {}, id="reward.txt"),
        pytest.param(
            {REWARD_TXT: b"0.25", REWARD_JSON: b'{"reward": 0.9}'},
            RewardSource.AUTO,
            0.25,
            {},
            id="reward.txt-wins-over-json",
        ),
        pytest.param(
            {REWARD_JSON: json.dumps({"reward": 0.5, "passed": 3}).encode()},
            RewardSource.AUTO,
            0.5,
            {"reward": 0.5, "passed": 3.0},
            id="reward.json-with-metrics",
        ),
        pytest.param({}, RewardSource.AUTO, 0.5, {}, id="no-file-passed-over-total"),
        pytest.param({REWARD_TXT: b"0.3"}, RewardSource.COMMANDS, 0.5, {}, id="commands-only"),
    ],
)
async def test_the_reward_is_read_by_the_rules(
    verifier_writes: dict[str, bytes],
    source: RewardSource,
    reward: float,
    metrics: dict[str, float],
) -> None:
    async def verify(sandbox: MemorySandbox) -> int:
        sandbox.files.update(verifier_writes)
        return 0

    spec = _spec(verify=("verify-step", "verify-fails"), reward_source=source)
    replies: dict[str, Reply] = {"verify-step": verify, "verify-fails": 1}
    rollout = await _Rollout(spec, replies).result()
    assert _error(rollout) == (RolloutStatus.SUCCEEDED, None)
    assert rollout.result.reward == reward
    assert rollout.result.metrics == metrics


async def test_no_verify_commands_and_no_reward_file_leave_the_reward_unset() -> None:
    rollout = await _Rollout(_spec(verify=())).result()
    assert _error(rollout) == (RolloutStatus.SUCCEEDED, None)
    assert rollout.result.reward is None


@pytest.mark.parametrize(
    ("written", "source"),
    [
        pytest.param({REWARD_TXT: b"high"}, RewardSource.AUTO, id="reward.txt-not-a-number"),
        pytest.param({REWARD_JSON: b"{"}, RewardSource.AUTO, id="reward.json-not-json"),
        pytest.param({}, RewardSource.FILE, id="file-required-but-missing"),
    ],
)
async def test_a_reward_that_cannot_be_read_fails_verifier(
    written: dict[str, bytes], source: RewardSource
) -> None:
    async def verify(sandbox: MemorySandbox) -> int:
        sandbox.files.update(written)
        return 0

    run = _Rollout(_spec(reward_source=source), {"verify-step": verify})
    rollout = await run.result()
    assert _error(rollout) == (RolloutStatus.FAILED, ErrorKind.VERIFIER)
    assert rollout.result.reward is None
    assert run.sandbox.kills == 1


async def test_a_reward_file_the_agent_left_is_removed_before_verification() -> None:
    replies: dict[str, Reply] = {"agent-step": _writes(REWARD_TXT, b"1.0"), "verify-step": 1}
    run = _Rollout(_spec(), replies)
    rollout = await run.result()
    assert rollout.result.reward == 0.0, "the agent's reward.txt was read"
    topics = [getattr(e, "topic", "") for e in run.events]
    assert "verifier.leftovers" in topics


async def test_a_cancel_while_queued_ends_it_without_a_sandbox() -> None:
    run = _Rollout(_spec(), slot=_Slot(closed=True))
    run.start()
    await asyncio.sleep(0.01)
    assert run.task is not None
    run.task.cancel()
    rollout = await run.result()
    assert _error(rollout) == (RolloutStatus.CANCELLED, ErrorKind.CANCELLED)
    assert run.backend.requests == []
    assert run.slot.taken == 0
    assert run.phases() == [], "nothing ran, so no phase was entered (not even TEARDOWN)"


def _held_at(call: str, nth: int = 1) -> Hook:
    """A hook holding the `nth` call of that name for ever."""
    calls = 0

    async def hook(name: str) -> None:
        nonlocal calls
        calls += name == call
        if name == call and calls == nth:
            await _forever(name)

    return hook


async def _prepare_forever() -> None:
    await _forever(None)


@pytest.mark.parametrize(
    ("phase", "replies", "hook"),
    [
        pytest.param(Phase.CREATING_SANDBOX, {}, ("create", 1), id="creating-sandbox"),
        pytest.param(Phase.PREPARING_AGENT, {}, None, id="preparing-agent"),
        pytest.param(Phase.SETUP, {"setup-step": _forever}, None, id="setup"),
        pytest.param(Phase.AGENT, {"agent-step": _forever}, None, id="agent"),
        pytest.param(Phase.VERIFYING, {"verify-step": _forever}, None, id="verifying"),
        # take_back lists VERIFIER_DIR, the reward's rules list it, then collection lists
        pytest.param(Phase.COLLECTING, {}, ("list_files", 3), id="collecting"),
    ],
)
async def test_a_cancel_in_each_phase_ends_it_cancelled_and_tears_down_once(
    phase: Phase, replies: dict[str, Reply], hook: tuple[str, int] | None
) -> None:
    run = _Rollout(_spec(), replies, hook=None if hook is None else _held_at(*hook))
    if phase is Phase.PREPARING_AGENT:
        run.agent.preparing = _prepare_forever
    run.start()
    await run.reach(phase)
    await asyncio.sleep(0.01)  # into the phase's work
    assert run.task is not None
    run.task.cancel()
    rollout = await run.result()
    assert _error(rollout) == (RolloutStatus.CANCELLED, ErrorKind.CANCELLED)
    assert run.phases()[-2:] == [phase, Phase.TEARDOWN]
    assert rollout.result.timings.total_s > 0, "the run's time was not recorded"
    kills = [sandbox.kills for sandbox in run.backend.sandboxes]
    assert kills == ([] if phase is Phase.CREATING_SANDBOX else [1])
