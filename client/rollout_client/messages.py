"""Python values to request messages, shared by the sync and the asyncio client.

A spec is given either as a `RolloutSpec` message or as a mapping in the proto JSON shape,
for example::

    {"task": {"instruction": "fix the bug", "setup": ["pip install -e ."], "verify": ["pytest"]},
     "agent": {"name": "command", "command": "git apply /solution.patch"},
     "agent_timeout": "600s", "labels": {"epoch": "3"}}

Field names may be written as in the .proto (`agent_timeout`) or in lowerCamelCase
(`agentTimeout`). Beyond proto JSON, durations may be numbers of seconds (`agent_timeout: 90`,
as well as "90s"), enum values their short names in any case (`network: FULL` or `full` for
NETWORK_POLICY_FULL), and bytes fields (`task.files` values, `harbor_task.archive`) raw
`bytes` as well as base64 strings: proto JSON's parser would read raw bytes as base64.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias, cast

from google.protobuf import duration_pb2, json_format
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper
from rollout.v1 import rollout_pb2 as pb

from rollout_client.errors import SpecError

__all__ = [
    "AGENT_NAMES",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_TARGET",
    "GroupStatusLike",
    "SpecLike",
    "StatusLike",
    "ViewLike",
    "cancel_request",
    "channel_options",
    "exec_request",
    "get_request",
    "group_spec",
    "list_groups_request",
    "list_request",
    "model_call_selector",
    "open_session_request",
    "parse_group_status",
    "parse_network",
    "parse_status",
    "parse_view",
    "run_request",
    "start_request",
    "to_spec",
    "watch_request",
]

DEFAULT_TARGET = "127.0.0.1:50051"
AGENT_NAMES = ("command", "oracle", "opencode", "claude-code", "codex", "mini-swe-agent")
"""The harnesses a server runs (`agent.name`): the keys of the server's `service.registry.AGENTS`,
spelled here so the client need not import the server (a test keeps the two equal)."""
# Results carry turns with token ids and workdir files: far past gRPC's 4 MiB default.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

_SPEC = cast(Descriptor, pb.RolloutSpec.DESCRIPTOR)
SpecLike: TypeAlias = pb.RolloutSpec | Mapping[str, Any]
# An enum value, its full name ("ROLLOUT_STATUS_FAILED") or its short name ("failed").
StatusLike: TypeAlias = pb.RolloutStatus | int | str
ViewLike: TypeAlias = pb.ResultView | int | str
GroupStatusLike: TypeAlias = pb.GroupStatus | int | str


def channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    """Channel options raising gRPC's send and receive limits to `max_message_bytes`."""
    if max_message_bytes <= 0:
        raise ValueError(f"max_message_bytes must be positive, got {max_message_bytes}")
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]


def to_spec(spec: SpecLike) -> pb.RolloutSpec:
    """`spec` as a RolloutSpec message; a mapping is parsed as proto JSON."""
    if isinstance(spec, pb.RolloutSpec):
        return spec
    if not isinstance(spec, Mapping):
        raise SpecError(f"a spec is a RolloutSpec or a mapping, not {type(spec).__name__}")
    try:
        return json_format.ParseDict(_shorthands(spec, _SPEC, "spec"), pb.RolloutSpec())
    except json_format.ParseError as exc:
        # ParseError names the offending field, over several lines.
        raise SpecError("invalid spec: " + " ".join(str(exc).split())) from exc


def _shorthands(data: Mapping[str, Any], message: Descriptor, path: str) -> dict[str, Any]:
    """`data` with short enum names and numbers of seconds spelled as proto JSON wants them."""
    fields = {f.name: f for f in message.fields} | {f.json_name: f for f in message.fields}
    out = dict(data)
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            continue  # unknown: ParseDict names it
        where = f"{path}.{field.name}"
        if _is_map(field):
            out[key] = _map_shorthands(field, value)
        elif isinstance(value, list):
            out[key] = [_shorthand(field, item, where) for item in value]
        else:
            out[key] = _shorthand(field, value, where)
    return out


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _map_shorthands(field: FieldDescriptor, value: Any) -> Any:
    """A map's values with raw bytes as base64; its keys and other values as written."""
    value_field = cast(Descriptor, field.message_type).fields_by_name["value"]
    if not isinstance(value, Mapping) or value_field.type != FieldDescriptor.TYPE_BYTES:
        return value
    return {key: _bytes_as_base64(item) for key, item in value.items()}


def _bytes_as_base64(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    return value


def _shorthand(field: FieldDescriptor, value: Any, path: str) -> Any:
    if field.type == FieldDescriptor.TYPE_BYTES:
        return _bytes_as_base64(value)
    if field.enum_type is not None and isinstance(value, str):
        return _enum_name(field.enum_type, value, path)
    message = field.message_type
    if message is None:
        return value
    if message.full_name == "google.protobuf.Duration" and _is_number(value):
        duration = duration_pb2.Duration()
        duration.FromNanoseconds(round(value * 1e9))
        return duration.ToJsonString()
    if isinstance(value, Mapping) and not message.full_name.startswith("google.protobuf."):
        return _shorthands(value, message, path)
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _enum_name(enum: EnumDescriptor, value: str, path: str) -> str:
    """The full name of `value`, given as it (any case) or without the enum's prefix."""
    names = [v.name for v in enum.values]
    prefix = names[0].removesuffix("UNSPECIFIED")  # buf style: FOO_UNSPECIFIED = 0
    wanted = value.strip().upper()
    for name in (wanted, prefix + wanted):
        if name in names:
            return name
    known = ", ".join(n.removeprefix(prefix) for n in names[1:])
    raise SpecError(f"{path}: unknown value {value!r} (one of: {known})")


def _parse_enum(wrapper: EnumTypeWrapper, prefix: str, value: int | str) -> int:
    if isinstance(value, str):
        name = value.strip().upper()
        name = name if name.startswith(prefix) else prefix + name
        names = wrapper.keys()
        if name not in names:
            known = ", ".join(n.removeprefix(prefix) for n in names[1:])
            raise ValueError(f"unknown {prefix.rstrip('_').lower()} {value!r} (one of: {known})")
        return wrapper.Value(name)
    if value not in wrapper.values():
        raise ValueError(f"unknown {prefix.rstrip('_').lower()} value {value}")
    return value


def parse_status(value: StatusLike) -> pb.RolloutStatus:
    """A RolloutStatus from its value or name ("FAILED", "failed", "ROLLOUT_STATUS_FAILED")."""
    return cast(pb.RolloutStatus, _parse_enum(pb.RolloutStatus, "ROLLOUT_STATUS_", value))


def parse_group_status(value: GroupStatusLike) -> pb.GroupStatus:
    """A GroupStatus from its value or name ("RUNNING", "completed", "GROUP_STATUS_FAILED")."""
    return cast(pb.GroupStatus, _parse_enum(pb.GroupStatus, "GROUP_STATUS_", value))


def parse_network(value: pb.NetworkPolicy | int | str) -> pb.NetworkPolicy:
    """A NetworkPolicy from its value or name ("FULL", "none", "NETWORK_POLICY_FULL")."""
    return cast(pb.NetworkPolicy, _parse_enum(pb.NetworkPolicy, "NETWORK_POLICY_", value))


def parse_view(value: ViewLike) -> pb.ResultView:
    """A ResultView from its value or name ("slim", "RESULT_VIEW_FULL")."""
    return cast(pb.ResultView, _parse_enum(pb.ResultView, "RESULT_VIEW_", value))


def run_request(spec: SpecLike, view: ViewLike) -> pb.RunRolloutRequest:
    return pb.RunRolloutRequest(spec=to_spec(spec), view=parse_view(view))


def start_request(spec: SpecLike) -> pb.StartRolloutRequest:
    return pb.StartRolloutRequest(spec=to_spec(spec))


def watch_request(
    rollout_id: str, after_seq: int, labels: Mapping[str, str] | None
) -> pb.WatchRolloutRequest:
    return pb.WatchRolloutRequest(rollout_id=rollout_id, after_seq=after_seq, labels=labels)


def get_request(rollout_id: str, view: ViewLike) -> pb.GetRolloutRequest:
    return pb.GetRolloutRequest(rollout_id=rollout_id, view=parse_view(view))


def list_request(
    labels: Mapping[str, str] | None,
    statuses: Iterable[StatusLike],
    page_size: int,
    page_token: str,
    view: ViewLike,
) -> pb.ListRolloutsRequest:
    return pb.ListRolloutsRequest(
        labels=labels,
        statuses=[parse_status(s) for s in statuses],
        page_size=page_size,
        page_token=page_token,
        view=parse_view(view),
    )


def list_groups_request(
    labels: Mapping[str, str] | None,
    statuses: Iterable[GroupStatusLike],
    page_size: int,
    page_token: str,
) -> pb.ListGroupsRequest:
    return pb.ListGroupsRequest(
        labels=labels,
        statuses=[parse_group_status(s) for s in statuses],
        page_size=page_size,
        page_token=page_token,
    )


def cancel_request(rollout_id: str, reason: str) -> pb.CancelRolloutRequest:
    return pb.CancelRolloutRequest(rollout_id=rollout_id, reason=reason)


def group_spec(
    spec: SpecLike,
    n: int,
    *,
    min_complete: int = 0,
    max_refills: int | None = None,
    deadline_s: float | None = None,
) -> pb.GroupSpec:
    """A GroupSpec: n members of `spec` (see the GroupSpec message for the knobs)."""
    message = pb.GroupSpec(
        spec=to_spec(spec), n=n, min_complete=min_complete, max_refills=max_refills
    )
    if deadline_s is not None:
        message.deadline.FromNanoseconds(int(deadline_s * 1e9))
    return message


def model_call_selector(
    base_url: str = "", model: str = "", labels: Mapping[str, str] | None = None
) -> pb.ModelCallSelector:
    """Rollouts by endpoint (`base_url`, and `model` or any) or by `labels`: one of the two."""
    if labels and (base_url or model):
        raise ValueError("select by endpoint (base_url, model) or by labels, not both")
    if labels:
        return pb.ModelCallSelector(labels=pb.LabelSelector(labels=dict(labels)))
    return pb.ModelCallSelector(endpoint=pb.EndpointSelector(base_url=base_url, model=model))


def _duration(seconds: float | None) -> duration_pb2.Duration | None:
    if seconds is None:
        return None
    duration = duration_pb2.Duration()
    duration.FromNanoseconds(round(seconds * 1e9))
    return duration


def open_session_request(
    spec: SpecLike,
    copies: int,
    idle_timeout_s: float | None,
    max_lifetime_s: float | None,
) -> pb.OpenSessionRequest:
    """An OpenSession request: `copies` sessions of `spec` (its `agent` unset)."""
    return pb.OpenSessionRequest(
        spec=to_spec(spec),
        copies=copies,
        idle_timeout=_duration(idle_timeout_s),
        max_lifetime=_duration(max_lifetime_s),
    )


def exec_request(
    session_id: str,
    command: str,
    timeout_s: float | None,
    cwd: str,
    env: Mapping[str, str] | None,
    max_output_bytes: int,
) -> pb.ExecRequest:
    """One `bash -c` command for a session (see ExecRequest for the bounds)."""
    return pb.ExecRequest(
        session_id=session_id,
        command=command,
        timeout=_duration(timeout_s),
        cwd=cwd,
        env=env,
        max_output_bytes=max_output_bytes,
    )
