"""Harbor's own trajectory models (what `valid_atif` checks exports against) refuse what
ATIF does not allow, so the export tests that validate against them can fail."""

from __future__ import annotations

import json
from typing import Any

from tests.export.checks import harbor_validation_error

STEP = {"step_id": 1, "source": "agent", "message": "", "metrics": {}}
VALID = {
    "schema_version": "ATIF-v1.4",
    "session_id": "r",
    "agent": {"name": "a", "version": "1"},
    "steps": [STEP],
}


def _refused(document: dict[str, Any]) -> bool:
    return harbor_validation_error(json.dumps(document)) is not None


def test_harbor_accepts_a_minimal_trajectory() -> None:
    assert harbor_validation_error(json.dumps(VALID)) is None


def test_harbor_refuses_what_atif_does_not_allow() -> None:
    broken = [
        {**VALID, "schema_version": "ATIF-v0.9"},
        {**VALID, "agent": {"name": "a"}},
        {**VALID, "unknown_key": "t"},
        {**VALID, "steps": [{**STEP, "step_id": 2}]},
        {**VALID, "steps": [{**STEP, "source": "user"}]},  # metrics on a user step
        {**VALID, "steps": [{**STEP, "tool_calls": [{"tool_call_id": "c"}]}]},
    ]
    assert [document for document in broken if not _refused(document)] == []
