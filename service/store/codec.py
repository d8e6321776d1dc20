"""JSON text for stored models, event payloads tagged by type, and opaque page tokens.

Pydantic writes `bytes` into JSON as UTF-8, which fails on arbitrary binary files (task and
result files). Models that hold bytes are therefore written with base64 bytes, and read back by
restoring base64 to bytes at exactly the places their schema declares `bytes`. Models without
bytes take pydantic's direct JSON path. Bytes nested under `Any` are not supported.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import pydantic_core
from pydantic import BaseModel

from service.errors import FieldViolation, SpecError
from service.models import EventPayload

__all__ = [
    "PAYLOAD_TYPES",
    "decode_model",
    "decode_page_token",
    "encode_model",
    "encode_page_token",
]

M = TypeVar("M", bound=BaseModel)
Restore = Callable[[Any], Any]

PAYLOAD_TYPES: dict[str, type[EventPayload]] = {
    payload_type.__name__: payload_type for payload_type in typing.get_args(EventPayload)
}
"""Event payload type name (stored beside the payload) -> model."""


def encode_model(model: BaseModel) -> str:
    """The model as JSON text that `decode_model` turns back into an equal model."""
    if _restorer(type(model)) is None:
        return model.model_dump_json()
    return pydantic_core.to_json(model.model_dump(), bytes_mode="base64").decode()


def decode_model(model_type: type[M], text: str) -> M:
    """The model `encode_model` wrote as `text`."""
    restore = _restorer(model_type)
    if restore is None:
        return model_type.model_validate_json(text)
    return model_type.model_validate(restore(json.loads(text)))


def encode_page_token(create_us: int, rollout_id: str) -> str:
    """An opaque token for the page after the row (create_us, rollout_id)."""
    raw = json.dumps([create_us, rollout_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_page_token(token: str) -> tuple[int, str]:
    """The (create_us, rollout_id) in `token`; SpecError naming "page_token" if it is not one."""
    try:
        create_us, rollout_id = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, UnicodeError, ValueError, TypeError) as exc:
        raise _bad_token() from exc
    if type(create_us) is not int or not isinstance(rollout_id, str):
        raise _bad_token()
    return create_us, rollout_id


def _bad_token() -> SpecError:
    return SpecError([FieldViolation("page_token", "not a next_page_token this server returned")])


@functools.cache
def _restorer(annotation: Any) -> Restore | None:
    """A function turning base64 text back into bytes wherever `annotation` declares bytes.

    None when the annotation holds no bytes, so callers can take the fast path.
    """
    if annotation is bytes:
        return base64.urlsafe_b64decode
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model_restorer(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is dict:
        return _map_values(_restorer(args[1]))
    if origin in (list, tuple) and (len(args) == 1 or args[1:] == (Ellipsis,)):
        return _map_items(_restorer(args[0]))
    if origin in (typing.Union, types.UnionType):
        return _optional(annotation, args)
    if any(_restorer(arg) is not None for arg in args):
        raise TypeError(f"cannot store bytes inside {annotation!r}")
    return None


def _model_restorer(model_type: type[BaseModel]) -> Restore | None:
    annotations: dict[str, Any] = {
        name: field.annotation for name, field in model_type.model_fields.items()
    }
    fields = {
        name: restore
        for name, annotation in annotations.items()
        if (restore := _restorer(annotation)) is not None
    }
    if not fields:
        return None

    def restore_model(data: dict[str, Any]) -> dict[str, Any]:
        for name, restore in fields.items():
            if data.get(name) is not None:
                data[name] = restore(data[name])
        return data

    return restore_model


def _map_values(restore: Restore | None) -> Restore | None:
    if restore is None:
        return None
    return lambda data: {key: restore(value) for key, value in data.items()}


def _map_items(restore: Restore | None) -> Restore | None:
    if restore is None:
        return None
    return lambda data: [restore(item) for item in data]


def _optional(annotation: Any, args: tuple[Any, ...]) -> Restore | None:
    """Only `X | None` may hold bytes: with two byte-holding members, JSON cannot tell which."""
    restorers = [restore for arg in args if (restore := _restorer(arg)) is not None]
    if not restorers:
        return None
    members = [arg for arg in args if arg is not type(None)]
    if len(members) > 1:
        raise TypeError(f"cannot store bytes inside {annotation!r}")
    restore = restorers[0]
    return lambda data: None if data is None else restore(data)
