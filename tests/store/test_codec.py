"""The store's JSON codec and page tokens."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from service.errors import SpecError
from service.models import Rollout, RolloutSpec, TaskSpec, Turn
from service.store.codec import (
    PAYLOAD_TYPES,
    decode_model,
    decode_page_token,
    encode_model,
    encode_page_token,
)
from testing.samples import BINARY, full_rollout


class _Ambiguous(BaseModel):
    value: bytes | str = b""


class _Nested(BaseModel):
    maybe: TaskSpec | None = None
    blobs: list[bytes] = []
    pairs: dict[str, list[bytes]] = {}


def test_bytes_round_trip_wherever_the_schema_declares_them() -> None:
    nested = _Nested(
        maybe=TaskSpec(instruction="x", files={"f": BINARY}),
        blobs=[BINARY, b""],
        pairs={"a": [b"\x00", BINARY]},
    )

    assert decode_model(_Nested, encode_model(nested)) == nested
    assert decode_model(_Nested, encode_model(_Nested())) == _Nested()
    rollout = full_rollout()
    assert decode_model(Rollout, encode_model(rollout)) == rollout


def test_models_without_bytes_take_pydantic_json() -> None:
    spec = RolloutSpec(task=TaskSpec(instruction="x"))
    assert encode_model(Turn(index=1)) == Turn(index=1).model_dump_json()
    assert "files" in encode_model(spec)


def test_a_union_that_json_cannot_tell_apart_is_refused() -> None:
    with pytest.raises(TypeError, match="cannot store bytes"):
        encode_model(_Ambiguous())


def test_payload_types_name_every_event_payload() -> None:
    names = {"PhaseChanged", "CommandResult", "Turn", "AgentOutput", "Notice", "Rollout"}
    assert set(PAYLOAD_TYPES) == names


def test_page_tokens_round_trip() -> None:
    assert decode_page_token(encode_page_token(1_700_000_000_123_456, "id:with/odd")) == (
        1_700_000_000_123_456,
        "id:with/odd",
    )


@pytest.mark.parametrize(
    "token", ["", "=", "e30=", "WzEsMiwzXQ==", "WzEuNSwieCJd", "W3RydWUsIngiXQ=="]
)
def test_bad_page_tokens_name_the_field(token: str) -> None:
    with pytest.raises(SpecError) as caught:
        decode_page_token(token)

    assert caught.value.violations[0].field == "page_token"
