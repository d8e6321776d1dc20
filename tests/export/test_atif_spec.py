"""The spec's models (atif_spec.py) are strict: what ATIF-v1.4 does not allow is refused, so
the export tests that validate against them can fail."""

from __future__ import annotations

import pydantic
import pytest

from tests.export.atif_spec import Trajectory


def test_the_spec_models_refuse_what_v1_4_does_not_allow() -> None:
    step = {"step_id": 1, "source": "agent", "message": "", "metrics": {}}
    valid = {
        "schema_version": "ATIF-v1.4",
        "session_id": "r",
        "agent": {"name": "a", "version": "1"},
        "steps": [step],
    }
    Trajectory.model_validate(valid)
    broken = [
        {**valid, "schema_version": "ATIF-v1.8"},
        {**valid, "agent": {"name": "a"}},
        {**valid, "trajectory_id": "t"},  # a v1.7 field
        {**valid, "steps": []},
        {**valid, "steps": [{**step, "step_id": 2}]},
        {**valid, "steps": [{**step, "source": "user"}]},  # metrics on a user step
        {**valid, "steps": [{**step, "metrics": {"completion_token_ids": [1], "logprobs": []}}]},
        {**valid, "steps": [{**step, "metrics": {"prompt_token_ids": ["1"]}}]},
        {**valid, "steps": [{**step, "observation": {"results": [{"source_call_id": "c"}]}}]},
        {**valid, "steps": [{**step, "tool_calls": [{"tool_call_id": "c", "function_name": "f"}]}]},
    ]
    for document in broken:
        with pytest.raises(pydantic.ValidationError):
            Trajectory.model_validate(document)
