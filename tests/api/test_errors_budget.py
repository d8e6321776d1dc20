"""A status fits a client's trailer limit however many and however large the violations."""

from __future__ import annotations

from google.rpc import code_pb2, error_details_pb2

from service.api.errors import DETAILS_MAX_BYTES, MESSAGE_MAX_BYTES, _status
from service.errors import FieldViolation, NotFoundError, SpecError


def test_many_huge_violations_are_cut_to_the_budget_and_counted() -> None:
    huge = "\u20ac" * 50_000  # 3 bytes each in UTF-8
    error = SpecError([FieldViolation(f"spec.f{i}{huge}", huge) for i in range(1_000)])
    status = _status(error)
    assert status.code == code_pb2.INVALID_ARGUMENT
    assert len(status.message.encode()) <= MESSAGE_MAX_BYTES
    bad_request = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad_request)
    assert bad_request.ByteSize() <= DETAILS_MAX_BYTES
    shown = len(bad_request.field_violations)
    assert 0 < shown < 1_000
    assert bad_request.field_violations[0].field.startswith("spec.f0")
    assert status.message.endswith(f"({1_000 - shown} more violations not shown)")


def test_a_short_error_is_sent_whole() -> None:
    status = _status(SpecError([FieldViolation("spec.task.instruction", "is required")]))
    assert status.message == "spec.task.instruction: is required"
    status = _status(NotFoundError("no rollout " + "z" * 10_000))
    assert status.code == code_pb2.NOT_FOUND
    assert len(status.message) <= MESSAGE_MAX_BYTES
