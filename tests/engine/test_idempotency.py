"""The spec digest behind request_id idempotency: what makes two specs the same request."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.engine.idempotency import check_same_request, spec_digest
from service.errors import RequestConflictError
from service.models import EndpointSpec, RolloutSpec, TaskSpec
from service.store.sqlite import SqliteStore
from testing.samples import full_rollout


def spec(**changes: object) -> RolloutSpec:
    base = RolloutSpec(
        task=TaskSpec(instruction="fix it", files={"a.py": b"1"}, verifier_files={"t.py": b"2"}),
        labels={"team": "rl", "run": "7"},
        request_id="req-1",
    )
    return base.model_copy(update=changes)


def test_label_order_and_the_api_key_are_not_part_of_the_request() -> None:
    reordered = spec(labels={"run": "7", "team": "rl"})
    keyed = spec(endpoint=EndpointSpec(base_url="http://h/v1", api_key="sk-1"))
    rotated = spec(endpoint=EndpointSpec(base_url="http://h/v1", api_key="sk-2"))

    assert spec_digest(reordered) == spec_digest(spec())
    assert spec_digest(keyed) == spec_digest(rotated)


@pytest.mark.parametrize(
    "other",
    [
        spec(
            task=TaskSpec(instruction="fix it", files={"a.py": b"X"}, verifier_files={"t.py": b"2"})
        ),
        spec(
            task=TaskSpec(instruction="fix it", files={"b.py": b"1"}, verifier_files={"t.py": b"2"})
        ),
        spec(
            task=TaskSpec(instruction="fix it", files={"t.py": b"2"}, verifier_files={"a.py": b"1"})
        ),
        spec(
            task=TaskSpec(instruction="other", files={"a.py": b"1"}, verifier_files={"t.py": b"2"})
        ),
        spec(labels={"team": "rl"}),
        spec(agent_timeout_s=5.0),
    ],
    ids=["file-content", "file-name", "files-swapped", "instruction", "labels", "timeout"],
)
def test_any_other_difference_is_another_request(other: RolloutSpec) -> None:
    assert spec_digest(other) != spec_digest(spec())


async def test_a_stored_rollout_is_still_the_same_request_after_reopening(tmp_path: Path) -> None:
    sent = full_rollout(api_key="sk-secret")
    async with SqliteStore(tmp_path / "r.db") as store:
        await store.insert(sent)
    async with SqliteStore(tmp_path / "r.db") as reopened:
        stored = await reopened.find_by_request_id(sent.spec.request_id)

    assert stored is not None
    assert check_same_request(stored, sent.spec) is stored
    changed = sent.spec.model_copy(update={"task_id": "t-2"})
    with pytest.raises(RequestConflictError) as caught:
        check_same_request(stored, changed)
    assert [v.field for v in caught.value.violations] == ["spec.request_id"]
    assert stored.id in str(caught.value)
