"""Property-based fuzzing of the whole request surface, against a real server over gRPC.

Requests of every RPC are generated from the proto's descriptors (`proto_strategies`),
plus raw bytes sent as requests. The properties (issue 9):
- no call ends UNKNOWN or INTERNAL (or any code outside the RPC's expected set);
- every rejection is INVALID_ARGUMENT with a google.rpc.BadRequest naming a field, in a
  status a client with a 16 KiB metadata limit can read;
- every accepted spec ends in a terminal state whose error kind is never SANDBOX or
  INTERNAL (the server is healthy and idle otherwise, so such a kind could only come
  from something the spec said).
Bounded by example counts and short server timeouts, so it stays a fast test; the counts
of what ran are printed (`pytest -s`) and asserted to be non-trivial.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from google.protobuf.struct_pb2 import Struct
from grpc_status import rpc_status
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess, running
from testing.specs import terminal
from tests.e2e.bad_request import violated_fields
from tests.e2e.proto_strategies import EDGE_TEXT, messages, mutants

pytestmark = pytest.mark.e2e

CLIENT_METADATA_LIMIT = 16 * 1024
SPEC_EXAMPLES = 200
REQUEST_EXAMPLES = 60
RAW_EXAMPLES = 40
SETTLE_TIMEOUT_S = 240.0

SAFE_COMMANDS = ("true", "exit 3", "echo hi > out.txt", "printf x; false", "ls -la", "cat in.txt")
SPEC_HINTS: dict[str, st.SearchStrategy[Any]] = {
    "rollout.v1.Task.instruction": st.just("do the task"),
    "rollout.v1.Task.setup": st.lists(st.sampled_from(SAFE_COMMANDS), max_size=2),
    "rollout.v1.Task.verify": st.lists(st.sampled_from(SAFE_COMMANDS), max_size=2),
    "rollout.v1.Task.files": st.dictionaries(
        st.sampled_from(("in.txt", "src/a.py", "src/b/c.txt")), st.binary(max_size=8)
    ),
    "rollout.v1.Task.verifier_files": st.dictionaries(
        st.sampled_from(("test.sh", "tests/t.py", "in.txt")), st.binary(max_size=8)
    ),
    "rollout.v1.Agent.name": st.sampled_from(("", "command")),
    "rollout.v1.Agent.command": st.sampled_from(SAFE_COMMANDS),
    "rollout.v1.Endpoint.kind": st.sampled_from(("", "vllm")),
    "rollout.v1.Endpoint.base_url": st.sampled_from(("", "http://127.0.0.1:9", "https://h/v1")),
    "rollout.v1.Endpoint.model": st.sampled_from(("", "m")),
    "rollout.v1.Endpoint.api_key": st.sampled_from(("", "sk-caller")),
    "rollout.v1.SandboxSpec.backend": st.sampled_from(("", "local")),
    "rollout.v1.SandboxSpec.network": st.sampled_from((0, 1, 2, 2)),
    "rollout.v1.Capture.mode": st.sampled_from((0, 1, 1, 2)),
    "rollout.v1.Resources.cpu_count": st.sampled_from((0, 1, 8)),
    "rollout.v1.Resources.memory_mb": st.sampled_from((0, 64, 512)),
    "rollout.v1.Resources.max_processes": st.sampled_from((0, 16, 64)),
    "rollout.v1.Resources.cpu_seconds": st.sampled_from((0, 1, 30)),
    "rollout.v1.Resources.max_file_size_mb": st.sampled_from((0, 1)),
    "google.protobuf.Duration.seconds": st.integers(1, 5),
    "google.protobuf.Duration.nanos": st.integers(0, 999_999_999),
    "rollout.v1.RolloutSpec.labels": st.dictionaries(st.sampled_from(("a", "b")), st.just("v")),
    "rollout.v1.RolloutSpec.request_id": st.just(""),
    "rollout.v1.RolloutSpec.task_id": st.sampled_from(("", "task-1")),
    "rollout.v1.SandboxSpec.template": st.just(""),
    "rollout.v1.Agent.options": st.just(Struct()),
    "rollout.v1.Capture.top_logprobs": st.integers(0, 20),
    "rollout.v1.Task.env": st.dictionaries(st.sampled_from(("A", "B_1")), st.just("v")),
    "rollout.v1.Task.verifier_env": st.dictionaries(st.just("V"), st.just("1")),
    "rollout.v1.Task.solution_env": st.dictionaries(st.just("S"), st.just("1")),
    "rollout.v1.Task.file_modes": st.just({}),
    "rollout.v1.Task.solution_files": st.just({}),  # they need an image; the session's is host
    "rollout.v1.Task.workdir": st.sampled_from(("", "/home/user/w")),
    "rollout.v1.RolloutSpec.harbor_task": st.none(),  # mutants still graft arbitrary ones
}
"""Biases toward specs that pass admission and run (quickly), mixed with the generic values."""
RUNNABLE_SPECS = messages(pb.RolloutSpec, hints=SPEC_HINTS, strict=True)
"""Specs whose hinted fields are all valid: most pass admission; the rest still vary."""
MUTANT_SPECS = mutants(pb.RolloutSpec, RUNNABLE_SPECS)
"""Runnable specs with one field, anywhere, made arbitrary."""

REQUEST_HINTS: dict[str, st.SearchStrategy[Any]] = {
    "rollout.v1.WatchRolloutRequest.after_seq": st.sampled_from((0, 2**63 - 1, 2**63)),
    "rollout.v1.ListRolloutsRequest.page_size": st.sampled_from((0, 1, 500, 2**32 - 1)),
}

Outcomes = Counter[str]


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with short budgets, so that whatever a generated spec runs ends soon."""
    env = {
        "ROLLOUT_MAX_RUNNING": "6",
        "ROLLOUT_MAX_QUEUED": "1000",
        "ROLLOUT_AGENT_TIMEOUT_DEFAULT_S": "5",
        "ROLLOUT_AGENT_TIMEOUT_MAX_S": "10",
        "ROLLOUT_COMMAND_TIMEOUT_DEFAULT_S": "5",
        "ROLLOUT_COMMAND_TIMEOUT_MAX_S": "10",
        "VLLM_BASE_URL": "http://127.0.0.1:9/v1",
        "VLLM_API_KEY": "server-held-key",
        "VLLM_MODEL": "m",
    }
    server = ServerProcess(tmp_path_factory.mktemp("fuzz-state"), env=env)
    with running(server):
        yield server


@pytest.fixture(scope="module")
def channel(fuzz_server: ServerProcess) -> Iterator[grpc.Channel]:
    options = [
        ("grpc.max_metadata_size", CLIENT_METADATA_LIMIT),
        ("grpc.absolute_max_metadata_size", CLIENT_METADATA_LIMIT),
    ]
    with grpc.insecure_channel(fuzz_server.target, options=options) as channel:
        yield channel


def _bounded(examples: int) -> Callable[[Any], Any]:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def check_rejection(error: grpc.RpcError, outcomes: Outcomes, *, watching: bool = False) -> None:
    """An RPC error is one of the expected codes; INVALID_ARGUMENT names its fields."""
    code = error.code()
    outcomes[code.name] += 1
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        fields = violated_fields(error)
        assert fields, f"no violation: {error.details()}"
        assert all(fields), f"a violation names no field: {error.details()}"
    elif code == grpc.StatusCode.RESOURCE_EXHAUSTED:  # capacity, never an oversized trailer
        status = rpc_status.from_call(error)
        assert status is not None, error.details()
        assert status.details, error.details()
    else:
        expected = {grpc.StatusCode.NOT_FOUND}
        if watching:
            expected.add(grpc.StatusCode.DEADLINE_EXCEEDED)
        assert code in expected, f"{code.name}: {error.details()}"


def test_fuzzed_specs_are_refused_naming_a_field_or_run_to_a_fair_end(
    channel: grpc.Channel,
) -> None:
    stub = pb_grpc.RolloutServiceStub(channel)
    outcomes: Outcomes = Counter()
    accepted: dict[str, pb.RolloutSpec] = {}

    @_bounded(SPEC_EXAMPLES)
    @given(spec=st.one_of(MUTANT_SPECS, MUTANT_SPECS, messages(pb.RolloutSpec, hints=SPEC_HINTS)))
    def start(spec: pb.RolloutSpec) -> None:
        try:
            rollout = stub.StartRollout(pb.StartRolloutRequest(spec=spec), timeout=30).rollout
        except grpc.RpcError as error:
            check_rejection(error, outcomes)
            return
        outcomes["accepted"] += 1
        accepted[rollout.id] = spec

    start()
    kinds = _settle(stub, accepted)
    print(f"\nfuzzed specs: {SPEC_EXAMPLES} cases, {dict(outcomes)}, terminal kinds {dict(kinds)}")
    assert outcomes["INVALID_ARGUMENT"] > 0, outcomes
    assert outcomes["accepted"] > 0, outcomes


def _settle(stub: pb_grpc.RolloutServiceStub, accepted: dict[str, pb.RolloutSpec]) -> Outcomes:
    """Wait for every accepted rollout to end; no SANDBOX or INTERNAL kind among them."""
    kinds: Outcomes = Counter()
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    pending = dict(accepted)
    while pending and time.monotonic() < deadline:
        for rollout_id in list(pending):
            request = pb.GetRolloutRequest(rollout_id=rollout_id, view=pb.RESULT_VIEW_SLIM)
            rollout = stub.GetRollout(request, timeout=30).rollout
            if not terminal(rollout):
                continue
            spec = pending.pop(rollout_id)
            kind = rollout.result.error.kind
            kinds[pb.ErrorKind.Name(kind)] += 1
            assert kind not in (pb.ERROR_KIND_SANDBOX, pb.ERROR_KIND_INTERNAL), (
                f"{rollout.result.error.message}\nspec: {spec}"
            )
        time.sleep(0.2)
    assert not pending, f"{len(pending)} rollouts still running after {SETTLE_TIMEOUT_S}s"
    return kinds


RPCS: dict[str, tuple[type[Message], bool]] = {
    "GetRollout": (pb.GetRolloutRequest, False),
    "ListRollouts": (pb.ListRolloutsRequest, False),
    "CancelRollout": (pb.CancelRolloutRequest, False),
    "WatchRollout": (pb.WatchRolloutRequest, True),
}


def _call(channel: grpc.Channel, method: str, streaming: bool, data: bytes) -> None:
    path = f"/rollout.v1.RolloutService/{method}"
    if streaming:
        watch: grpc.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(path)
        for _ in watch(data, timeout=0.3):
            pass
    else:
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(path)
        call(data, timeout=30)


@pytest.mark.parametrize("method", RPCS)
def test_fuzzed_requests_of_every_rpc_are_answered_cleanly(
    channel: grpc.Channel, method: str
) -> None:
    request_type, streaming = RPCS[method]
    outcomes: Outcomes = Counter()

    @_bounded(REQUEST_EXAMPLES)
    @given(request=messages(request_type, hints=REQUEST_HINTS))
    def call(request: Message) -> None:
        try:
            _call(channel, method, streaming, request.SerializeToString())
            outcomes["OK"] += 1
        except grpc.RpcError as error:
            check_rejection(error, outcomes, watching=streaming)

    call()
    print(f"\nfuzzed {method}: {REQUEST_EXAMPLES} cases, {dict(outcomes)}")
    assert sum(outcomes.values()) >= REQUEST_EXAMPLES


def _raw_bytes() -> st.SearchStrategy[bytes]:
    """Bytes that mostly do not decode: junk, and valid messages with a byte flipped."""
    mangled = messages(pb.StartRolloutRequest).flatmap(
        lambda message: st.tuples(st.just(message.SerializeToString()), st.integers(0, 255)).map(
            lambda pair: pair[0][:-1] + bytes([pair[1]]) if pair[0] else b"\xff"
        )
    )
    utf8 = st.sampled_from(EDGE_TEXT).map(lambda text: b"\x0a\x03\x0a\x01" + text.encode()[:1])
    return st.one_of(st.binary(min_size=1, max_size=64), mangled, utf8)


@pytest.mark.parametrize("method", ["StartRollout", "RunRollout", *RPCS])
def test_raw_bytes_are_never_unknown(channel: grpc.Channel, method: str) -> None:
    streaming = method == "WatchRollout"
    outcomes: Outcomes = Counter()

    @_bounded(RAW_EXAMPLES)
    @given(data=_raw_bytes())
    def call(data: bytes) -> None:
        try:
            _call(channel, method, streaming, data)
            outcomes["OK"] += 1
        except grpc.RpcError as error:
            check_rejection(error, outcomes, watching=streaming)

    call()
    print(f"\nraw bytes to {method}: {RAW_EXAMPLES} cases, {dict(outcomes)}")
    assert outcomes["INVALID_ARGUMENT"] > 0, outcomes
