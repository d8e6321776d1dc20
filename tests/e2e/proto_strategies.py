"""Hypothesis strategies for any protobuf message, built from its descriptor.

    messages(pb.RolloutSpec, hints=SPEC_HINTS)
    mutants(pb.RolloutSpec, messages(pb.RolloutSpec, hints=SPEC_HINTS, strict=True))

Every field of the message (and of its messages, recursively) gets values of its wire
type, weighted toward the edges a server must survive: empty, NUL, CR/LF, non-latin-1 and
overlong text; integer limits (Durations out of range among them); enum numbers no version
defines; NaN and Infinity in Structs. Each field is left unset a quarter of the time.
`hints` maps a full field name (e.g. "rollout.v1.Agent.name") to a strategy drawn five times
in six instead of the generic one (and the field is then always set); with `strict`, always,
so that a fair share of generated requests is valid and runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

from google.protobuf import message_factory, struct_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

__all__ = ["EDGE_TEXT", "Hints", "field_paths", "messages", "mutants", "values"]

Hints = Mapping[str, st.SearchStrategy[Any]]

EDGE_TEXT = (
    "",
    "\x00",
    "a\x00b",
    "a\r\nX-Injected: 1",
    "€ü漢",
    "\ud7ff\ue000",
    ".",
    "./",
    "../x",
    "a/b",
    "/abs",
    "x" * 300,
    "http://[::1",
    "http://127.0.0.1:99999/v1",
    "http://user:pw@127.0.0.1:9/v1",
    "http://127.0.0.1:9/v1",
)
"""Text the red team found or that breaks argv, headers, paths or URLs."""

_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def _text() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(EDGE_TEXT), st.text(max_size=24))


def _integers(low: int, high: int) -> st.SearchStrategy[int]:
    edges = sorted({low, high, 0, 1, min(high, 2**31 - 1), min(high, 2**63), max(low, -1)})
    edges = [edge for edge in edges if low <= edge <= high]
    return st.one_of(st.sampled_from(edges), st.integers(low, high), st.integers(0, 100))


def _floats() -> st.SearchStrategy[float]:
    return st.one_of(
        st.sampled_from((math.nan, math.inf, -math.inf, 0.0, -0.0, 1e308)),
        st.floats(allow_nan=True, allow_infinity=True, width=32),
    )


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(st.none(), st.booleans(), _floats(), _text())
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(_text(), inner, max_size=3)
        ),
        max_leaves=6,
    )


def _struct() -> st.SearchStrategy[struct_pb2.Struct]:
    def build(document: dict[str, Any]) -> struct_pb2.Struct:
        message = struct_pb2.Struct()
        message.update(document)
        return message

    return st.dictionaries(_text(), _json_values(), max_size=3).map(build)


def values(
    field: FieldDescriptor, hints: Hints, strict: bool, depth: int
) -> st.SearchStrategy[Any]:
    """One value of `field`'s element type (a list or dict is built by the caller)."""
    kind = field.type
    if kind == FieldDescriptor.TYPE_MESSAGE:
        assert field.message_type is not None
        if field.message_type.full_name == "google.protobuf.Struct":
            return _struct()
        nested = message_factory.GetMessageClass(field.message_type)
        return messages(nested, hints=hints, strict=strict, depth=depth + 1)
    if kind == FieldDescriptor.TYPE_STRING:
        return _text()
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=32)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return _floats()
    if kind == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        defined = sorted(field.enum_type.values_by_number)
        return st.one_of(st.sampled_from(defined), _integers(-(2**31), 2**31 - 1))
    low, high = _INT_RANGES[kind]
    return _integers(low, high)


def _field(
    field: FieldDescriptor, hints: Hints, strict: bool, depth: int
) -> st.SearchStrategy[Any]:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key = field.message_type.fields_by_name["key"]
        value = field.message_type.fields_by_name["value"]
        generic: st.SearchStrategy[Any] = st.dictionaries(
            values(key, hints, strict, depth), values(value, hints, strict, depth), max_size=3
        )
    elif field.is_repeated:
        generic = st.lists(values(field, hints, strict, depth), max_size=3)
    else:
        generic = values(field, hints, strict, depth)
    hint = hints.get(field.full_name)
    if hint is None:
        return generic
    return hint if strict else st.one_of(*[hint] * 5, generic)


def _fill(message: Message, field: FieldDescriptor, value: Any) -> None:
    target = getattr(message, field.name)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        if field.message_type.fields_by_name["value"].message_type is None:
            target.update(value)
        else:
            for key, item in value.items():
                target[key].CopyFrom(item)
    elif field.is_repeated:
        target.extend(value)
    elif field.message_type is not None:
        target.CopyFrom(value)
    else:
        setattr(message, field.name, value)


def messages(
    message_type: type[Message],
    *,
    hints: Hints | None = None,
    strict: bool = False,
    depth: int = 0,
) -> st.SearchStrategy[Message]:
    """Messages of `message_type`, every field drawn (or left unset) independently.

    `strict`: hinted fields take only their hint and message fields are always set, so
    the messages are mostly valid (the unhinted fields still vary).
    """
    hints = hints or {}
    descriptor = cast(Descriptor, message_type.DESCRIPTOR)
    if depth > 4:
        return st.just(message_type())
    fields = {
        field.name: _field(field, hints, strict, depth)
        if field.full_name in hints or (strict and field.message_type is not None)
        else st.one_of(st.none(), *[_field(field, hints, strict, depth)] * 3)
        for field in descriptor.fields
    }

    def build(drawn: dict[str, Any]) -> Message:
        message = message_type()
        for name, value in drawn.items():
            if value is not None:
                _fill(message, descriptor.fields_by_name[name], value)
        return message

    return st.fixed_dictionaries(fields).map(build)


def field_paths(message_type: type[Message], depth: int = 0) -> list[tuple[str, ...]]:
    """Every field of `message_type` and of its (non-map, non-Struct) messages, as paths."""
    descriptor = cast(Descriptor, message_type.DESCRIPTOR)
    paths: list[tuple[str, ...]] = []
    for field in descriptor.fields:
        paths.append((field.name,))
        nested = field.message_type
        if nested is None or field.is_repeated or depth > 4:
            continue
        if nested.full_name == "google.protobuf.Struct":
            continue
        nested_type = message_factory.GetMessageClass(nested)
        paths += [(field.name, *rest) for rest in field_paths(nested_type, depth + 1)]
    return paths


def _graft(target: Message, source: Message, path: tuple[str, ...]) -> Message:
    """`target` with the field at `path` replaced by `source`'s (set or unset alike)."""
    into, out_of = target, source
    for name in path[:-1]:
        into, out_of = getattr(into, name), getattr(out_of, name)
    name = path[-1]
    field = cast(FieldDescriptor, into.DESCRIPTOR.fields_by_name[name])
    into.ClearField(name)
    if field.is_repeated or field.message_type is not None:
        if field.is_repeated or out_of.HasField(name):
            _fill(into, field, _copied(getattr(out_of, name), field))
    elif not field.has_presence or out_of.HasField(name):
        setattr(into, name, getattr(out_of, name))
    return target


def _copied(value: Any, field: FieldDescriptor) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        return dict(value)
    return list(value) if field.is_repeated else value


def mutants(
    message_type: type[Message], valid: st.SearchStrategy[Message]
) -> st.SearchStrategy[Message]:
    """A `valid` message with one field (at any depth) replaced by an arbitrary value of its
    type: the shape of most real bad requests, and of accepted ones that fail later."""
    arbitrary = messages(message_type)
    return st.builds(_graft, valid, arbitrary, st.sampled_from(field_paths(message_type)))
