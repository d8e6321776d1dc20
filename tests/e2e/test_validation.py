"""Bad input is INVALID_ARGUMENT naming the offending field (google.rpc BadRequest details)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.specs import command_spec
from tests.e2e.bad_request import violated_fields
from tests.e2e.group_support import group_spec

pytestmark = pytest.mark.e2e


def _no_instruction() -> pb.RolloutSpec:
    spec = command_spec()
    spec.task.instruction = ""
    return spec


def _negative_timeout() -> pb.RolloutSpec:
    spec = command_spec()
    spec.agent_timeout.seconds = -5
    return spec


def _absurd_timeout() -> pb.RolloutSpec:
    spec = command_spec()
    spec.agent_timeout.seconds = 10**9
    return spec


def _oversized_instruction() -> pb.RolloutSpec:
    spec = command_spec()
    spec.task.instruction = "x" * (2 * 1024 * 1024)
    return spec


def _escaping_file() -> pb.RolloutSpec:
    spec = command_spec()
    spec.task.files["../../etc/passwd"] = b"x"
    return spec


def _at(base_url: str) -> Callable[[], pb.RolloutSpec]:
    return lambda: command_spec(endpoint={"baseUrl": base_url, "model": "m"})


CASES = {
    "no instruction": (_no_instruction, "spec.task.instruction"),
    "negative timeout": (_negative_timeout, "spec.agent_timeout"),
    "absurd timeout": (_absurd_timeout, "spec.agent_timeout"),
    "unknown agent": (lambda: command_spec(agent={"name": "nope"}), "spec.agent.name"),
    "no command": (lambda: command_spec(agent={"command": ""}), "spec.agent.command"),
    "unknown backend": (lambda: command_spec(sandbox={"backend": "vm"}), "spec.sandbox.backend"),
    "oversized instruction": (_oversized_instruction, "spec.task.instruction"),
    "escaping file path": (_escaping_file, "spec.task.files['../../etc/passwd']"),
    "opencode without endpoint": (
        lambda: command_spec(agent={"name": "opencode", "command": ""}),
        "spec.endpoint",
    ),
    "black box without network": (
        lambda: command_spec(
            endpoint={"baseUrl": "http://127.0.0.1:9/v1", "model": "m"},
            capture={"mode": "CAPTURE_MODE_BLACK_BOX"},
        ),
        "spec.sandbox.network",
    ),
    "unknown endpoint kind": (
        lambda: command_spec(endpoint={"kind": "moon"}),
        "spec.endpoint.kind",
    ),
    "cloud metadata base_url": (_at("http://169.254.169.254/latest"), "spec.endpoint.base_url"),
    "NAT64 cloud metadata base_url": (
        _at("http://[64:ff9b::a9fe:a9fe]/v1"),
        "spec.endpoint.base_url",
    ),
    "negative temperature": (
        lambda: command_spec(sampling={"temperature": -0.5}),
        "spec.sampling.temperature",
    ),
    "no repetition penalty": (
        lambda: command_spec(sampling={"repetitionPenalty": 0.0}),
        "spec.sampling.repetition_penalty",
    ),
    "IPv4-compatible cloud metadata base_url": (
        _at("http://[::169.254.169.254]/v1"),
        "spec.endpoint.base_url",
    ),
    "6to4 cloud metadata base_url": (_at("http://[2002:a9fe:a9fe::]/v1"), "spec.endpoint.base_url"),
    "private base_url": (_at("http://10.0.0.5:8000/v1"), "spec.endpoint.base_url"),
}


@pytest.mark.parametrize("case", CASES)
async def test_bad_spec_is_invalid_argument(
    stub: pb_grpc.RolloutServiceAsyncStub, case: str
) -> None:
    build, field = CASES[case]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.StartRollout(pb.StartRolloutRequest(spec=build()))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in violated_fields(caught.value), caught.value.details()


async def test_every_violation_is_reported_at_once(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    spec = _no_instruction()
    spec.agent.name = "nope"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    assert {"spec.task.instruction", "spec.agent.name"} <= set(violated_fields(caught.value))


async def test_unknown_rollout_is_not_found(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    for call in (
        stub.GetRollout(pb.GetRolloutRequest(rollout_id="nope")),
        stub.CancelRollout(pb.CancelRolloutRequest(rollout_id="nope")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in stub.WatchRollout(pb.WatchRolloutRequest(rollout_id="nope")):
            pass
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_missing_rollout_id_is_invalid_argument(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetRollout(pb.GetRolloutRequest())
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violated_fields(caught.value) == ["rollout_id"]


async def test_bad_page_token_is_invalid_argument(stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ListRollouts(pb.ListRolloutsRequest(page_token="!!garbage!!"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "page_token" in violated_fields(caught.value)


async def test_a_group_endpoint_is_judged_like_a_rollouts(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    endpoint = {"baseUrl": "http://[fd00:ec2::254]/latest", "model": "m"}
    spec = group_spec(command_spec(endpoint=endpoint), 2)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.StartGroup(pb.StartGroupRequest(spec=spec))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violated_fields(caught.value) == ["spec.spec.endpoint.base_url"]
    assert "fd00:ec2::254 is a cloud metadata address" in (caught.value.details() or "")
