"""A rollout as a Harbor trajectory: ATIF-v1.4 (Agent Trajectory Interchange Format).

ATIF is specified by Harbor's RFC 0001 (docs/rfcs/0001-trajectory-format.md); v1.4 is the
first version whose per-step `metrics` carry `prompt_token_ids`, `completion_token_ids` and
`logprobs`, and every later Harbor release reads it. Only fields that exist in v1.4 are
written. How a rollout maps onto it:

| ATIF                    | from the rollout                                                    |
| ----------------------- | ------------------------------------------------------------------- |
| session_id              | the rollout id                                                      |
| agent.name / model_name | spec.agent.name / spec.endpoint.model; version "unknown" (a rollout |
|                         | does not record its harness's version)                              |
| system / user step      | a request message with role system or developer / user, in the      |
|                         | order turns first sent them (`request_messages` hold only what is   |
|                         | new since the lane's previous call, so nothing repeats); content    |
|                         | parts' texts one per line; extra: turn_index and trainable of the   |
|                         | turn that sent it                                                   |
| agent step              | one per turn: completion_text, reasoning_text, tool_calls, and      |
|                         | metrics (usage, exact token ids, logprobs)                          |
| observation             | a `tool` message, on the agent step that made that call             |
| agent step extra        | turn_index, trainable, dialect, finish_reason, requested_model;     |
|                         | policy_version_start / _end and upstream_weight_version when set;   |
|                         | upstream_error, incomplete, body_cut when the call went wrong       |
| extra                   | rollout_id, status, reward, metrics, error_kind, group_id and       |
|                         | member_index; policy_version_min / _max when set                    |
| final_metrics           | token totals, step count                                            |

Auxiliary calls (opencode's title generation: `trainable` false) are separate conversations,
kept in call order; every step they produced, their prompts included, has `extra.trainable`
false, so a consumer drops them all by that flag. Assistant messages inside requests are
skipped: they are the agent's own earlier completions, already agent steps of the turns that
produced them. `logprobs` is written only when the upstream scored every completion token
(`logprobs_present`), so it always aligns with `completion_token_ids`.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format
from rollout.v1 import rollout_pb2 as pb

from rollout_client.export.turn_data import completion_logprobs, policy_versions, version_range
from rollout_client.results import reward_of, status_name

__all__ = ["ATIF_VERSION", "to_atif"]

ATIF_VERSION = "ATIF-v1.4"
_SYSTEM_ROLES = frozenset({"system", "developer"})


def to_atif(rollout: pb.Rollout) -> dict[str, Any]:
    """The rollout as one ATIF document (a JSON-ready dict); needs the FULL view's turns."""
    turns = list(rollout.result.turns)
    steps: list[dict[str, Any]] = []
    for turn in turns:
        _add_request(steps, turn)
        steps.append(_agent_step(turn))
    document: dict[str, Any] = {
        "schema_version": ATIF_VERSION,
        "session_id": rollout.id,
        "agent": _agent(rollout),
        "steps": steps or [_instruction_step(rollout)],
        "final_metrics": _final_metrics(turns, len(steps) or 1),
        "extra": _rollout_extra(rollout),
    }
    if not turns:
        document["notes"] = "The rollout made no model calls: the only step is the task's."
    for number, step in enumerate(document["steps"], start=1):
        step["step_id"] = number
    return document


def _agent(rollout: pb.Rollout) -> dict[str, Any]:
    agent: dict[str, Any] = {"name": rollout.spec.agent.name or "unknown", "version": "unknown"}
    if rollout.spec.endpoint.model:
        agent["model_name"] = rollout.spec.endpoint.model
    return agent


def _instruction_step(rollout: pb.Rollout) -> dict[str, Any]:
    return {"source": "user", "message": rollout.spec.task.instruction}


def _add_request(steps: list[dict[str, Any]], turn: pb.Turn) -> None:
    """The turn's new request messages as steps, tool results as observations."""
    for struct in turn.request_messages:
        message = json_format.MessageToDict(struct)
        role = message.get("role")
        extra = {"turn_index": turn.index, "trainable": turn.trainable}
        if role in _SYSTEM_ROLES:
            steps.append({"source": "system", "message": _text(message), "extra": extra})
        elif role == "user":
            steps.append({"source": "user", "message": _text(message), "extra": extra})
        elif role == "tool":
            _add_tool_result(steps, message, extra)


def _add_tool_result(
    steps: list[dict[str, Any]], message: dict[str, Any], extra: dict[str, Any]
) -> None:
    call_id = message.get("tool_call_id")
    result = {"source_call_id": call_id, "content": _text(message)}
    for step in reversed(steps):
        if any(call["tool_call_id"] == call_id for call in step.get("tool_calls", ())):
            step.setdefault("observation", {"results": []})["results"].append(result)
            return
    # No captured call made it (e.g. it came from a turn the capture cut): keep the content.
    orphan = {**extra, "role": "tool", "tool_call_id": call_id}
    steps.append({"source": "user", "message": result["content"], "extra": orphan})


def _text(message: dict[str, Any]) -> str:
    """A chat message's content as text: a string, or its text parts one per line, as vLLM
    renders them into the prompt (an Anthropic message's text blocks, a Responses message's
    input_text parts: claude-code's reminders, codex's instructions)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _agent_step(turn: pb.Turn) -> dict[str, Any]:
    step: dict[str, Any] = {"source": "agent", "message": turn.completion_text}
    if turn.HasField("start_time"):
        step["timestamp"] = turn.start_time.ToJsonString()
    if turn.reasoning_text:
        step["reasoning_content"] = turn.reasoning_text
    extra = _turn_extra(turn)
    if turn.tool_calls:
        step["tool_calls"] = [_tool_call(call, extra) for call in turn.tool_calls]
    step["metrics"] = _metrics(turn)
    step["extra"] = extra
    return step


def _tool_call(call: pb.ToolCall, extra: dict[str, Any]) -> dict[str, Any]:
    """ATIF wants the arguments as an object; text that is not one is kept in step.extra."""
    try:
        arguments = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        extra.setdefault("unparsed_tool_arguments", {})[call.id] = call.arguments
        arguments = {}
    return {"tool_call_id": call.id, "function_name": call.name, "arguments": arguments}


def _metrics(turn: pb.Turn) -> dict[str, Any]:
    metrics: dict[str, Any] = {
        "prompt_tokens": turn.usage.prompt_tokens,
        "completion_tokens": turn.usage.completion_tokens,
    }
    if turn.prompt_token_ids:
        metrics["prompt_token_ids"] = list(turn.prompt_token_ids)
    if turn.completion_token_ids:
        metrics["completion_token_ids"] = list(turn.completion_token_ids)
    if turn.logprobs and turn.logprobs_present:
        metrics["logprobs"] = completion_logprobs(turn)
    metrics["extra"] = {
        "token_ids_present": turn.token_ids_present,
        "logprobs_present": turn.logprobs_present,
        "usage_counted": turn.usage_counted,
    }
    return metrics


def _turn_extra(turn: pb.Turn) -> dict[str, Any]:
    extra: dict[str, Any] = {
        "turn_index": turn.index,
        "trainable": turn.trainable,
        "dialect": pb.Dialect.Name(turn.dialect).removeprefix("DIALECT_"),
        "finish_reason": turn.finish_reason,
        "requested_model": turn.requested_model,
        **policy_versions(turn),
    }
    if turn.upstream_weight_version:
        extra["upstream_weight_version"] = turn.upstream_weight_version
    if turn.upstream_error or turn.incomplete:
        extra.update(upstream_error=turn.upstream_error, incomplete=turn.incomplete)
    if turn.body_cut:
        extra["body_cut"] = True
    return extra


def _final_metrics(turns: list[pb.Turn], step_count: int) -> dict[str, Any]:
    return {
        "total_prompt_tokens": sum(turn.usage.prompt_tokens for turn in turns),
        "total_completion_tokens": sum(turn.usage.completion_tokens for turn in turns),
        "total_steps": step_count,
    }


def _rollout_extra(rollout: pb.Rollout) -> dict[str, Any]:
    extra: dict[str, Any] = {
        "rollout_id": rollout.id,
        "status": status_name(rollout.status),
        "reward": reward_of(rollout),
        "metrics": dict(rollout.result.metrics),
        **version_range(rollout.result),
    }
    if rollout.result.HasField("error"):
        extra["error_kind"] = pb.ErrorKind.Name(rollout.result.error.kind).removeprefix(
            "ERROR_KIND_"
        )
    if rollout.group_id:
        extra.update(group_id=rollout.group_id, member_index=rollout.member_index)
    return extra
