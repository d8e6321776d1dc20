"""The red team's fuzz findings (issue 9), each refused at admission naming its field.

Before, these got UNKNOWN, or were accepted and then failed as SANDBOX or INTERNAL, or
ran with a silent default. Every one must now be INVALID_ARGUMENT with a BadRequest
violation on the field at fault, in a status a client with a 16 KiB metadata limit reads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.specs import command_spec
from tests.e2e.bad_request import violated_fields

pytestmark = pytest.mark.e2e

CLIENT_METADATA_LIMIT = 16 * 1024


def violations(error: grpc.aio.AioRpcError) -> list[str]:
    """The BadRequest fields of a failed call (asserting it is INVALID_ARGUMENT)."""
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    return violated_fields(error)


@pytest.fixture
async def small_stub(server_target: str) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    """A stub whose channel takes trailers of 16 KiB at most, as the red team's client did."""
    options = [
        ("grpc.max_metadata_size", CLIENT_METADATA_LIMIT),
        ("grpc.absolute_max_metadata_size", CLIENT_METADATA_LIMIT),
        ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ]
    async with grpc.aio.insecure_channel(server_target, options=options) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


def _with(change: Callable[[pb.RolloutSpec], object]) -> Callable[[], pb.RolloutSpec]:
    def build() -> pb.RolloutSpec:
        spec = command_spec()
        change(spec)
        return spec

    return build


def _endpoint(**fields: str) -> Callable[[], pb.RolloutSpec]:
    return lambda: command_spec(endpoint={"model": "m", **fields})


def _resources(**fields: int) -> Callable[[], pb.RolloutSpec]:
    return lambda: command_spec(sandbox={"resources": fields})


def _file(path: str, *, beside: str = "", verifier: bool = False) -> Callable[[], pb.RolloutSpec]:
    def build() -> pb.RolloutSpec:
        spec = command_spec()
        spec.task.files[path] = b"x"
        if beside:
            (spec.task.verifier_files if verifier else spec.task.files)[beside] = b"y"
        return spec

    return build


LONG = "x" * 300
SPEC_CASES: dict[str, tuple[Callable[[], pb.RolloutSpec], str]] = {
    "NaN in options": (
        _with(lambda s: s.agent.options.update({"t": float("nan")})),
        "spec.agent.options.t",
    ),
    "Infinity nested in options": (
        _with(lambda s: s.agent.options.update({"a": {"b": [1, float("inf")]}})),
        "spec.agent.options.a.b[1]",
    ),
    "unclosed IPv6 host": (_endpoint(baseUrl="http://[::1"), "spec.endpoint.base_url"),
    "port 99999": (_endpoint(baseUrl="http://127.0.0.1:99999/v1"), "spec.endpoint.base_url"),
    "non-latin-1 URL": (_endpoint(baseUrl="http://127.0.0.1:9/v1/€"), "spec.endpoint.base_url"),
    "non-latin-1 key": (
        _endpoint(baseUrl="http://127.0.0.1:9/v1", apiKey="k€y"),
        "spec.endpoint.api_key",
    ),
    "CR/LF in key": (
        _endpoint(baseUrl="http://127.0.0.1:9/v1", apiKey="k\r\nX-Injected: 1"),
        "spec.endpoint.api_key",
    ),
    "user:password in URL": (
        _endpoint(baseUrl="http://user:pw@127.0.0.1:9/v1"),
        "spec.endpoint.base_url",
    ),
    "key with no base URL": (
        lambda: command_spec(endpoint={"apiKey": "sk-x"}),
        "spec.endpoint.api_key",
    ),
    "path '.'": (_file("."), "spec.task.files['.']"),
    "path './'": (_file("./"), "spec.task.files['./']"),
    "path 'a//b'": (_file("a//b"), "spec.task.files['a//b']"),
    "300-character name": (
        _file(LONG),
        f"spec.task.files[{LONG[:48]!r}... (300 chars)]",
    ),
    "'a' beside 'a/b'": (_file("a", beside="a/b"), "spec.task.files['a']"),
    "'a' beside verifier 'a/b'": (
        _file("a", beside="a/b", verifier=True),
        "spec.task.files['a']",
    ),
    "memory_mb=1": (_resources(memoryMb=1), "spec.sandbox.resources.memory_mb"),
    "memory_mb=100000": (_resources(memoryMb=100000), "spec.sandbox.resources.memory_mb"),
    "max_processes=4000000": (
        _resources(maxProcesses=4000000),
        "spec.sandbox.resources.max_processes",
    ),
    "cpu_seconds=2^32-1": (_resources(cpuSeconds=2**32 - 1), "spec.sandbox.resources.cpu_seconds"),
    "max_file_size_mb huge": (
        _resources(maxFileSizeMb=4_000_000),
        "spec.sandbox.resources.max_file_size_mb",
    ),
    "cpu_count huge": (_resources(cpuCount=100_000), "spec.sandbox.resources.cpu_count"),
    "unknown network": (_with(lambda s: setattr(s.sandbox, "network", 7)), "spec.sandbox.network"),
    "unknown reward source": (
        _with(lambda s: setattr(s.task, "reward_source", 5)),
        "spec.task.reward_source",
    ),
    "unknown capture mode": (_with(lambda s: setattr(s.capture, "mode", 9)), "spec.capture.mode"),
    "Duration nanos out of range": (
        _with(lambda s: s.agent_timeout.CopyFrom(Duration(seconds=1, nanos=2_000_000_000))),
        "spec.agent_timeout",
    ),
    "Duration signs disagree": (
        _with(lambda s: s.command_timeout.CopyFrom(Duration(seconds=5, nanos=-5))),
        "spec.command_timeout",
    ),
    "NUL in command": (lambda: command_spec("echo a\0b"), "spec.agent.command"),
    "NUL in setup": (lambda: command_spec(setup=("true\0",)), "spec.task.setup[0]"),
    "NUL in label key": (
        _with(lambda s: s.labels.update({"a\0b": "v"})),
        "spec.labels['a\\x00b']",
    ),
    "40 MiB command": (lambda: command_spec("true #" + "x" * (40 << 20)), "spec.agent.command"),
}


@pytest.mark.parametrize("case", SPEC_CASES)
async def test_spec_is_refused_naming_the_field(
    small_stub: pb_grpc.RolloutServiceAsyncStub, case: str
) -> None:
    build, field = SPEC_CASES[case]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await small_stub.StartRollout(pb.StartRolloutRequest(spec=build()))
    assert field in violations(caught.value)


async def test_a_request_that_does_not_decode_is_invalid_argument(server_target: str) -> None:
    async with grpc.aio.insecure_channel(server_target) as channel:
        for method in ("StartRollout", "GetRollout", "ListRollouts", "CancelRollout"):
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                f"/rollout.v1.RolloutService/{method}"
            )
            for data in (b"\xff\xff\xff", b"\x0a\x02\x0a\x01\xff"):  # corrupt; bad UTF-8
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await call(data)
                assert violations(caught.value) == ["request"], method
        watch: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(
            "/rollout.v1.RolloutService/WatchRollout"
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in watch(b"\x0a\x01\xff"):
                pass
        assert violations(caught.value) == ["request"]


async def test_list_filters_are_bounded(small_stub: pb_grpc.RolloutServiceAsyncStub) -> None:
    labels = {f"k{i}": "v" for i in range(10_000)}
    cases = {
        "labels": pb.ListRolloutsRequest(labels=labels),
        "statuses[1]": pb.ListRolloutsRequest(statuses=[pb.ROLLOUT_STATUS_FAILED, 99]),  # type: ignore[list-item]
        "statuses[0]": pb.ListRolloutsRequest(statuses=[pb.ROLLOUT_STATUS_UNSPECIFIED]),
        "view": pb.ListRolloutsRequest(view=77),  # type: ignore[arg-type]
    }
    for field, request in cases.items():
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await small_stub.ListRollouts(request)
        assert field in violations(caught.value)


async def test_watch_refuses_sequence_numbers_past_64_bits(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    finished = await stub.RunRollout(pb.RunRolloutRequest(spec=command_spec()))
    for after_seq in (2**63, 2**64 - 1):
        request = pb.WatchRolloutRequest(rollout_id=finished.rollout.id, after_seq=after_seq)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in stub.WatchRollout(request):
                pass
        assert violations(caught.value) == ["after_seq"]
    request = pb.WatchRolloutRequest(rollout_id=finished.rollout.id, after_seq=2**63 - 1)
    assert [event async for event in stub.WatchRollout(request)] == []


async def test_watch_refuses_a_flood_of_filter_labels(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    request = pb.WatchRolloutRequest(labels={f"k{i}": "v" for i in range(10_000)})
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in stub.WatchRollout(request):
            pass
    assert violations(caught.value) == ["labels"]


async def test_errors_quote_only_an_excerpt_of_huge_input(
    small_stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    """Many huge bad fields still make a status the 16 KiB client reads, naming them."""
    spec = command_spec(agent={"name": "n" * 100_000})
    spec.sandbox.backend = "b" * 100_000
    for i in range(2_000):
        spec.task.files[f"{i}/" + "p" * 3_000 + "/."] = b""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await small_stub.StartRollout(pb.StartRolloutRequest(spec=spec))
    fields = violations(caught.value)
    assert {"spec.agent.name", "spec.sandbox.backend"} <= set(fields)
    assert len(caught.value.details() or "") <= 1024
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await small_stub.GetRollout(pb.GetRolloutRequest(rollout_id="z" * 100_000))
    assert violations(caught.value) == ["rollout_id"]
