"""ATIF-v1.4, transcribed from its specification, to validate what `rollout export` writes.

Source: Harbor's RFC 0001 "Agent Trajectory Interchange Format (ATIF) Specification",
`docs/rfcs/0001-trajectory-format.md` (Changelog v1.4, October 2025), section II "Schema",
and the constraints of its published pydantic models, `src/harbor/models/trajectories/`
(harbor 0.26.0 on PyPI: agent.py, final_metrics.py, metrics.py, observation.py,
observation_result.py, step.py, subagent_trajectory_ref.py, tool_call.py, trajectory.py).
The `harbor` package needs Python 3.12+, so it cannot be a dependency here; this is written
from the spec (not copied), restricted to the fields v1.4 defines: fields later versions
added (trajectory_id, continued_trajectory_ref, subagent_trajectories, is_copied_context,
llm_call_count, tool_definitions, ToolCall.extra, ObservationResult.extra, multimodal
content parts) are refused, so a v1.4 file that uses them fails.

Strict on purpose: unknown keys are refused (`extra="forbid"`, as Harbor's models do),
required fields are required, and no type is coerced (`strict=True`: "1" is not an int).

Root (RFC II "Root-Level Metadata"):
    schema_version  String, Required  "ATIF-v1.4" (the version written)
    session_id      String, Required  unique identifier for the agent run
    agent           Object, Required  AgentSchema
    steps           Array,  Required  StepObject, at least one (trajectory.py min_length=1);
                                      step_id sequential from 1 (trajectory.py validator)
    notes           String, Optional
    final_metrics   Object, Optional  FinalMetricsSchema
    extra           Object, Optional
AgentSchema: name String Required; version String Required; model_name String Optional;
    extra Object Optional.
FinalMetricsSchema (all Optional): total_prompt_tokens, total_completion_tokens,
    total_cached_tokens Integer; total_cost_usd Float; total_steps Integer (>= 0);
    extra Object.
StepObject: step_id Integer Required (>= 1); timestamp String Optional (ISO 8601);
    source Required, one of "system", "user", "agent"; model_name String Optional;
    reasoning_effort String|Float Optional; message String Required (may be empty);
    reasoning_content String Optional; tool_calls Array Optional; observation Object
    Optional; metrics Object Optional; extra Object Optional. model_name,
    reasoning_effort, reasoning_content, tool_calls and metrics only when source is "agent"
    (step.py validator).
ToolCallSchema: tool_call_id String Required; function_name String Required; arguments
    Object Required (may be {}).
MetricsSchema (all Optional): prompt_tokens, completion_tokens, cached_tokens Integer;
    cost_usd Float; prompt_token_ids Array of Integer (v1.4); completion_token_ids Array of
    Integer (v1.3); logprobs Array of Float; extra Object. completion_token_ids and logprobs
    "should align" when both are present: held as a rule here, since the export promises it.
ObservationSchema: results Array Required of ObservationResultSchema.
ObservationResultSchema: source_call_id String Optional, and when set it names a
    tool_call_id of the same step (trajectory.py validator); content String Optional;
    subagent_trajectory_ref Array Optional of SubagentTrajectoryRefSchema.
SubagentTrajectoryRefSchema: session_id String Required; trajectory_path String Optional;
    extra Object Optional.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["Trajectory"]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Agent(_Spec):
    name: str
    version: str
    model_name: str | None = None
    extra: dict[str, Any] | None = None


class FinalMetrics(_Spec):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None


class ToolCall(_Spec):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]


class Metrics(_Spec):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _logprobs_align(self) -> Metrics:
        ids, logprobs = self.completion_token_ids, self.logprobs
        if ids is not None and logprobs is not None and len(ids) != len(logprobs):
            raise ValueError(f"{len(logprobs)} logprobs for {len(ids)} completion_token_ids")
        return self


class SubagentTrajectoryRef(_Spec):
    session_id: str
    trajectory_path: str | None = None
    extra: dict[str, Any] | None = None


class ObservationResult(_Spec):
    source_call_id: str | None = None
    content: str | None = None
    subagent_trajectory_ref: list[SubagentTrajectoryRef] | None = None


class Observation(_Spec):
    results: list[ObservationResult]


_AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


class Step(_Spec):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    extra: dict[str, Any] | None = None

    @field_validator("timestamp")
    @classmethod
    def _iso_8601(cls, value: str | None) -> str | None:
        if value is not None:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        return value

    @model_validator(mode="after")
    def _agent_only_fields(self) -> Step:
        if self.source != "agent":
            present = [name for name in _AGENT_ONLY if getattr(self, name) is not None]
            if present:
                raise ValueError(f"{present} only apply to agent steps, not {self.source}")
        return self

    @model_validator(mode="after")
    def _observations_name_own_calls(self) -> Step:
        calls = {call.tool_call_id for call in self.tool_calls or ()}
        for result in self.observation.results if self.observation else ():
            if result.source_call_id is not None and result.source_call_id not in calls:
                raise ValueError(f"source_call_id {result.source_call_id!r} is no call of it")
        return self


class Trajectory(_Spec):
    schema_version: Literal["ATIF-v1.4"]
    session_id: str
    agent: Agent
    steps: list[Step] = Field(min_length=1)
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _sequential_step_ids(self) -> Trajectory:
        ids = [step.step_id for step in self.steps]
        if ids != list(range(1, len(ids) + 1)):
            raise ValueError(f"step_ids must run 1, 2, ...: got {ids}")
        return self
