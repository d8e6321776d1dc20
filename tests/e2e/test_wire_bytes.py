"""The server writes each message as the same bytes every time (maps in key order), so replicas
and watchers can compare events byte for byte."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.message import Message
from rollout.v1 import rollout_pb2 as pb

from testing.specs import command_spec

pytestmark = pytest.mark.e2e

_LABELS = {f"label-{n:02d}": f"value-{n}" for n in range(40)}
"""Enough map entries that an unordered serialization (upb's hash order) shows."""


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


def _as_received(data: bytes) -> bytes:
    return data


def _in_key_order(data: bytes, message_type: type[Message]) -> bool:
    return message_type.FromString(data).SerializeToString(deterministic=True) == data


async def test_get_and_watch_write_label_maps_in_key_order(server_target: str) -> None:
    spec = command_spec("true", labels=dict(reversed(_LABELS.items())))
    method = "/rollout.v1.RolloutService/"
    async with grpc.aio.insecure_channel(server_target) as channel:
        run = channel.unary_unary(
            method + "RunRollout", _serialize, pb.RunRolloutResponse.FromString
        )
        get = channel.unary_unary(method + "GetRollout", _serialize, _as_received)
        watch = channel.unary_stream(method + "WatchRollout", _serialize, _as_received)
        rollout_id = (await run(pb.RunRolloutRequest(spec=spec))).rollout.id
        got = await get(pb.GetRolloutRequest(rollout_id=rollout_id))
        events = [data async for data in watch(pb.WatchRolloutRequest(rollout_id=rollout_id))]
    assert dict(pb.GetRolloutResponse.FromString(got).rollout.spec.labels) == _LABELS
    assert _in_key_order(got, pb.GetRolloutResponse)
    assert pb.WatchRolloutResponse.FromString(events[-1]).event.HasField("finished")
    assert all(_in_key_order(data, pb.WatchRolloutResponse) for data in events)
