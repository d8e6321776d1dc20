"""Domain objects with every field set, for store round trips."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from service.models import (
    AgentOutput,
    AgentOutputKind,
    AgentSpec,
    CommandResult,
    CommandStage,
    EndpointSpec,
    ErrorKind,
    EventPayload,
    Notice,
    Phase,
    PhaseChanged,
    PhaseTimings,
    Rollout,
    RolloutError,
    RolloutResult,
    RolloutSpec,
    RolloutStatus,
    TaskSpec,
    TokenLogprob,
    ToolCall,
    Turn,
    Usage,
)

__all__ = ["BASE_TIME", "BINARY", "full_rollout", "full_turn", "payloads", "rollout"]

BASE_TIME = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
BINARY = bytes(range(256))
"""Every byte value: not UTF-8, and base64 of it uses the URL-unsafe alphabet."""


def rollout(
    number: int,
    *,
    request_id: str = "",
    labels: dict[str, str] | None = None,
    status: RolloutStatus = RolloutStatus.QUEUED,
    create_time: datetime | None = None,
) -> Rollout:
    """A small rollout named r<number>, created <number> seconds after BASE_TIME."""
    spec = RolloutSpec(
        task=TaskSpec(instruction=f"task {number}"), labels=labels or {}, request_id=request_id
    )
    return Rollout(
        id=f"r{number:04d}",
        spec=spec,
        status=status,
        create_time=create_time or BASE_TIME + timedelta(seconds=number),
    )


def full_turn() -> Turn:
    return Turn(
        index=3,
        trainable=False,
        requested_model="small",
        request_messages=[{"role": "user", "content": [{"type": "text", "text": "hi é"}]}],
        request_message_offset=4,
        tools=[{"type": "function", "function": {"name": "bash", "parameters": {}}}],
        tools_hash="abc",
        completion_text="done",
        reasoning_text="thinking",
        tool_calls=[ToolCall(id="c1", name="bash", arguments='{"cmd": "ls"}')],
        finish_reason="tool_calls",
        prompt_token_ids=[1, 2, 3],
        completion_token_ids=[4, 5],
        logprobs=[-0.5, -1.25],
        completion_tokens=["do", "ne"],
        top_logprobs=[[TokenLogprob(token="do", token_id=4, logprob=-0.5)], []],
        token_ids_present=True,
        usage=Usage(prompt_tokens=3, completion_tokens=2, total_tokens=5),
        latency_s=1.5,
        time_to_first_token_s=0.25,
        upstream_status=200,
        upstream_error="",
        stream=True,
        start_time=BASE_TIME,
    )


def _command(stage: CommandStage) -> CommandResult:
    return CommandResult(
        stage=stage,
        index=1,
        command="pytest -q",
        exit_code=-1,
        stdout="out",
        stderr="err",
        stdout_bytes=3,
        stderr_bytes=99,
        duration_s=0.5,
        timed_out=True,
    )


def full_rollout(rollout_id: str = "full", *, api_key: str = "") -> Rollout:
    """A finished rollout with every field set, binary files included."""
    spec = RolloutSpec(
        task_id="t-1",
        task=TaskSpec(
            instruction="fix it",
            setup=("make",),
            verify=("pytest",),
            files={"data.bin": BINARY, "a.txt": b"text"},
            verifier_files={"tests/test_x.py": b"\xff\xfe"},
        ),
        agent=AgentSpec(name="command", command="true", options={"depth": [1, {"x": None}]}),
        endpoint=EndpointSpec(kind="vllm", base_url="http://h/v1", api_key=api_key, model="m"),
        agent_timeout_s=30.0,
        labels={"team": "rl", "run": "7"},
        request_id=f"req-{rollout_id}",
    )
    result = RolloutResult(
        reward=0.0,
        metrics={"passed": 1.0},
        agent_exit_code=0,
        setup_results=[_command(CommandStage.SETUP)],
        verify_results=[_command(CommandStage.VERIFY)],
        turns=[full_turn()],
        files={"out.bin": BINARY[::-1], "empty": b""},
        files_omitted=["huge.log"],
        agent_log_tail="tail",
        error=RolloutError(kind=ErrorKind.VERIFIER, message="no reward"),
        timings=PhaseTimings(agent_s=1.0, total_s=2.0),
        sandbox_id="sb-1",
    )
    return Rollout(
        id=rollout_id,
        spec=spec,
        status=RolloutStatus.FAILED,
        phase=Phase.DONE,
        result=result,
        create_time=BASE_TIME,
        start_time=BASE_TIME.astimezone(timezone(timedelta(hours=2))),
        finish_time=BASE_TIME + timedelta(seconds=9),
    )


def payloads() -> list[EventPayload]:
    """One payload of each type, several of which JSON alone would confuse."""
    return [
        PhaseChanged(phase=Phase.SETUP, status=RolloutStatus.RUNNING, message="m"),
        PhaseChanged(phase=Phase.QUEUED, status=RolloutStatus.QUEUED),
        _command(CommandStage.VERIFY),
        full_turn(),
        Turn(index=0),
        AgentOutput(kind=AgentOutputKind.TOOL_CALL, text="x", tool_name="bash"),
        AgentOutput(kind=AgentOutputKind.STDOUT),
        Notice(topic="verifier.leftovers", message="removed"),
        full_rollout(),
    ]
