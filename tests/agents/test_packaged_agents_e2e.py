"""Each packaged agent through the real server: a real local sandbox, the real capture proxy, a
scripted upstream that asks for a file write; reward 1, exact token data, no key anywhere, and
the rollout's ATIF file valid under Harbor's own trajectory models with the ids and
logprobs the upstream sent, its training records lined up.

One server for the module, with the console span exporter on, so its output holds its logs
and every span: the upstream key must appear in none of them. Each agent runs once; the export
is checked on that same rollout.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from google.protobuf import json_format
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.sandboxes.base import WORKDIR
from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from testing.server_process import ServerProcess, running
from tests.e2e.processes import eventually
from tests.export.checks import agent_steps, assert_exact_tokens, assert_train_records, valid_atif

pytestmark = [pytest.mark.e2e, pytest.mark.agents, pytest.mark.timeout(900)]

UPSTREAM_KEY = "sk-agents-upstream-secret-61f0"
UPSTREAM_MODEL = "fake-policy-agents"
CONTENT = "hello from a packaged agent"
INSTRUCTION = f"Write '{CONTENT}' into hello.txt."
THOUGHT = "The task wants one file written."


@pytest.fixture(scope="module")
def traced_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("agents-state"),
        env={"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "100"},
    )
    with running(server):
        yield server


@pytest.fixture
async def stub(traced_server: ServerProcess) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    async with grpc.aio.insecure_channel(traced_server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL) as upstream:
        yield upstream


def _bash(command: str, reasoning: str = "") -> Reply:
    return Reply(
        text="On it.",
        reasoning=reasoning,
        tool_calls=[ToolCallReply("bash", json.dumps({"command": command}))],
    )


def _spec(upstream: FakeUpstream, agent: str) -> pb.RolloutSpec:
    return pb.RolloutSpec(
        task=pb.Task(
            instruction=INSTRUCTION,
            verify=[f"grep -qx '{CONTENT}' hello.txt"],
        ),
        agent=pb.Agent(name=agent),
        endpoint=pb.Endpoint(
            base_url=upstream.base_url, api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL
        ),
    )


async def _run(
    stub: pb_grpc.RolloutServiceAsyncStub, spec: pb.RolloutSpec
) -> tuple[pb.GetRolloutResponse, list[pb.RolloutEvent]]:
    started = await stub.StartRollout(pb.StartRolloutRequest(spec=spec))
    request = pb.WatchRolloutRequest(rollout_id=started.rollout.id)
    events = [response.event async for response in stub.WatchRollout(request)]
    get = pb.GetRolloutRequest(rollout_id=started.rollout.id, view=pb.RESULT_VIEW_FULL)
    return await stub.GetRollout(get), events


def _assert_exact_token_data(turns: list[pb.Turn], upstream: FakeUpstream) -> None:
    """Every turn carries the ids and logprobs the upstream sent, in order."""
    assert len(turns) == len(upstream.sent)
    for turn, sent in zip(turns, upstream.sent, strict=True):
        assert turn.token_ids_present
        assert list(turn.prompt_token_ids) == sent.prompt_token_ids
        assert list(turn.completion_token_ids) == sent.completion_token_ids
        assert list(turn.logprobs) == pytest.approx(sent.logprobs, abs=1e-6)  # float32


def _has_lines(text: str, part: str) -> bool:
    """`part` is whole lines of `text`."""
    lines, wanted = text.splitlines(), part.splitlines()
    return any(lines[i : i + len(wanted)] == wanted for i in range(len(lines) - len(wanted) + 1))


def _assert_valid_export(
    rollout: pb.Rollout, upstream: FakeUpstream, write: Reply, observed: str
) -> None:
    """The ATIF file: valid; one agent step per turn with the upstream's exact ids and
    logprobs; every system and user request message a step of its own, in order, its text
    parts one per line; the scripted write a tool call whose result is its observation.
    The training records: one per turn, exact, the loss mask lined up."""
    document = valid_atif(rollout)
    agent = rollout.spec.agent.name
    assert document["agent"] == {"name": agent, "version": "unknown", "model_name": UPSTREAM_MODEL}
    turns = list(rollout.result.turns)
    steps = agent_steps(document)
    assert [s["extra"]["turn_index"] for s in steps] == [t.index for t in turns]
    for step, turn, sent in zip(steps, turns, upstream.sent, strict=True):
        assert_exact_tokens(step["metrics"], sent)
        assert step["extra"]["dialect"] == pb.Dialect.Name(turn.dialect).removeprefix("DIALECT_")
        assert step["extra"]["trainable"] is True
    prompts = [s for s in document["steps"] if s["source"] != "agent"]
    messages = [
        message
        for message in (json_format.MessageToDict(m) for t in turns for m in t.request_messages)
        if message["role"] in ("system", "developer", "user")
    ]
    assert [s["source"] for s in prompts] == [
        "user" if m["role"] == "user" else "system" for m in messages
    ]
    for step, message in zip(prompts, messages, strict=True):
        content = message["content"]
        texts = (
            [p["text"] for p in content if "text" in p] if isinstance(content, list) else [content]
        )
        assert all(_has_lines(step["message"], text) for text in texts), (step, message)
    assert any(INSTRUCTION in s["message"] for s in prompts if s["source"] == "user")

    [call] = steps[0]["tool_calls"]
    [scripted] = write.tool_calls
    assert call["function_name"] == scripted.name
    assert call["arguments"] == json.loads(scripted.arguments)
    [result] = steps[0]["observation"]["results"]
    assert result["source_call_id"] == call["tool_call_id"]
    assert observed in result["content"]
    assert steps[0]["reasoning_content"] == write.reasoning
    assert_train_records(rollout, upstream.sent)


async def _assert_no_key_anywhere(
    got: pb.GetRolloutResponse, events: list[pb.RolloutEvent], server: ServerProcess
) -> None:
    await eventually(lambda: '"name": "phase.agent"' in server.text())
    for blob in (got.SerializeToString(), *(e.SerializeToString() for e in events)):
        assert UPSTREAM_KEY.encode() not in blob
    assert UPSTREAM_KEY not in server.text()


async def test_mini_swe_agent_writes_the_file_and_reaches_reward_one(
    stub: pb_grpc.RolloutServiceAsyncStub, traced_server: ServerProcess, upstream: FakeUpstream
) -> None:
    write = _bash(f"printf '%s\\n' '{CONTENT}' > hello.txt", reasoning=THOUGHT)
    upstream.script(write, _bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"), match=has_tools)

    got, events = await _run(stub, _spec(upstream, "mini-swe-agent"))

    rollout = got.rollout
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.result.reward == pytest.approx(1.0)
    assert rollout.result.agent_exit_code == 0
    turns = list(rollout.result.turns)
    assert len(turns) == 2
    assert all(t.trainable for t in turns)
    _assert_exact_token_data(turns, upstream)
    calls = [e.output for e in events if e.HasField("output") and e.output.tool_name == "bash"]
    assert CONTENT in calls[0].text
    assert all(r.headers["authorization"] == f"Bearer {UPSTREAM_KEY}" for r in upstream.requests)
    await _assert_no_key_anywhere(got, events, traced_server)
    _assert_valid_export(rollout, upstream, write, observed='"returncode": 0')


def _call(name: str, **arguments: str) -> Reply:
    return Reply(reasoning=THOUGHT, tool_calls=[ToolCallReply(name, json.dumps(arguments))])


TRANSLATED_WRITES = {
    # claude-code speaks Messages; its Write tool wants an absolute path.
    "claude-code": (
        pb.DIALECT_MESSAGES,
        _call("Write", file_path=f"{WORKDIR}/hello.txt", content=f"{CONTENT}\n"),
        "File created successfully",
    ),
    # codex speaks Responses; its shell tool is exec_command.
    "codex": (
        pb.DIALECT_RESPONSES,
        _call("exec_command", cmd=f"echo '{CONTENT}' > hello.txt"),
        "exited with code 0",
    ),
}
"""Per agent: the dialect it speaks, the scripted write, and what its tool result says."""


@pytest.mark.parametrize("agent", sorted(TRANSLATED_WRITES))
async def test_a_translated_agent_writes_the_file_and_reaches_reward_one(
    stub: pb_grpc.RolloutServiceAsyncStub,
    traced_server: ServerProcess,
    upstream: FakeUpstream,
    agent: str,
) -> None:
    dialect, write, observed = TRANSLATED_WRITES[agent]
    upstream.script(write, match=has_tools)

    got, events = await _run(stub, _spec(upstream, agent))

    rollout = got.rollout
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, (
        rollout.result.error,
        rollout.result.agent_log_tail,
    )
    assert rollout.result.reward == pytest.approx(1.0)
    assert rollout.result.agent_exit_code == 0
    turns = [t for t in rollout.result.turns if t.upstream_status]
    assert {t.dialect for t in turns} == {dialect}
    assert all(t.translated for t in turns)
    assert sum(t.trainable for t in turns) >= 2  # the write, then the answer to its result
    _assert_exact_token_data(turns, upstream)
    assert any(
        e.output.kind == pb.AGENT_OUTPUT_KIND_TOOL_CALL for e in events if e.HasField("output")
    )
    assert all(r.path == "/v1/chat/completions" for r in upstream.requests)
    assert all(r.headers["authorization"] == f"Bearer {UPSTREAM_KEY}" for r in upstream.requests)
    await _assert_no_key_anywhere(got, events, traced_server)
    _assert_valid_export(rollout, upstream, write, observed)
