"""`rollout export` and the exporters, on real rollouts: the real server, real sandboxes, the
command agent speaking each dialect and opencode, against the scripted upstream. Every ATIF
document is validated by Harbor's own trajectory models (tests/export/checks.py), and its ids and
logprobs, like the training records', must be exactly what the upstream sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc
from rollout_client.cli import EXIT_ERROR, app
from rollout_client.export.command import ExportFormat, render
from rollout_client.export.train import to_train_records
from typer.testing import CliRunner

from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from testing.specs import command_spec
from tests.e2e.processes import eventually
from tests.export.checks import (
    agent_steps,
    assert_exact_tokens,
    assert_train_records,
    harbor_validation_error,
    valid_atif,
)

pytestmark = pytest.mark.e2e

KEY = "sk-export-upstream-secret-0c4d"
MODEL = "fake-policy-export"
SYSTEM = "Answer briefly."
QUESTION = "What does lookup say about x?"
RESULT = "lookup: x is 42"
ANSWER = "x is 42."

# The agent: the same two calls in one dialect: a question answered by a tool call, then the
# tool's result answered with text. `{path}` picks the dialect.
TWO_CALLS = """python3 - <<'PY'
import json, os, urllib.request
base, key, model, path = (os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"],
                          os.environ["OPENAI_MODEL"], {path!r})
schema = {{"type": "object", "properties": {{"q": {{"type": "string"}}}}}}
def post(body):
    request = urllib.request.Request(base + "/" + path, data=json.dumps(body).encode(),
        headers={{"Authorization": "Bearer " + key, "Content-Type": "application/json"}})
    return json.loads(urllib.request.urlopen(request, timeout=60).read())
if path == "chat/completions":
    tools = [{{"type": "function", "function": {{"name": "lookup", "parameters": schema}}}}]
    messages = [{{"role": "system", "content": {system!r}}}]
    messages += [{{"role": "user", "content": {question!r}}}]
    body = {{"model": model, "tools": tools}}
    message = post({{**body, "messages": messages}})["choices"][0]["message"]
    call = message["tool_calls"][0]["id"]
    messages += [message, {{"role": "tool", "tool_call_id": call, "content": {result!r}}}]
    print(post({{**body, "messages": messages}})["choices"][0]["message"]["content"])
elif path == "responses":
    tools = [{{"type": "function", "name": "lookup", "parameters": schema}}]
    items = [{{"role": "user", "content": {question!r}}}]
    body = {{"model": model, "instructions": {system!r}, "tools": tools}}
    output = post({{**body, "input": items}})["output"]
    call = next(o for o in output if o["type"] == "function_call")
    items += [call, {{"type": "function_call_output", "call_id": call["call_id"],
                      "output": {result!r}}}]
    print(post({{**body, "input": items}})["output"])
else:
    tools = [{{"name": "lookup", "input_schema": schema}}]
    body = {{"model": model, "max_tokens": 256, "system": {system!r}, "tools": tools}}
    messages = [{{"role": "user", "content": {question!r}}}]
    content = post({{**body, "messages": messages}})["content"]
    call = next(c for c in content if c["type"] == "tool_use")
    messages += [{{"role": "assistant", "content": content}}, {{"role": "user", "content": [
        {{"type": "tool_result", "tool_use_id": call["id"], "content": {result!r}}}]}}]
    print(post({{**body, "messages": messages}})["content"])
PY"""

# The agent: a streamed chat call (which the upstream holds after its first chunk), then a
# unary one.
STREAM_THEN_CALL = """python3 - <<'PY'
import json, os, urllib.request
for stream in (True, False):
    body = {"model": os.environ["OPENAI_MODEL"], "stream": stream,
            "messages": [{"role": "user", "content": "stream" if stream else "call"}]}
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"})
    print(urllib.request.urlopen(request, timeout=60).read()[:80], flush=True)
PY"""

# The agent: a question answered by a call with arguments that are not JSON, then that call's
# result and one for a call the model never made.
ODD_CALLS = """python3 - <<'PY'
import json, os, urllib.request
def post(messages):
    body = {"model": os.environ["OPENAI_MODEL"], "messages": messages}
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(request, timeout=60).read())["choices"][0]["message"]
messages = [{"role": "user", "content": [{"type": "text", "text": "odd"},
                                         {"type": "text", "text": "calls"}]}]
message = post(messages)
messages += [message,
             {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "real"},
             {"role": "tool", "tool_call_id": "call_ghost", "content": "ghost"}]
print(post(messages)["content"])
PY"""

DIALECTS = {
    "chat/completions": pb.DIALECT_CHAT_COMPLETIONS,
    "responses": pb.DIALECT_RESPONSES,
    "messages": pb.DIALECT_MESSAGES,
}


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=KEY, model=MODEL) as upstream:
        yield upstream


def _endpoint(upstream: FakeUpstream) -> dict[str, str]:
    return {"baseUrl": upstream.base_url, "apiKey": KEY, "model": MODEL}


async def _run(stub: pb_grpc.RolloutServiceAsyncStub, spec: pb.RolloutSpec) -> pb.Rollout:
    request = pb.RunRolloutRequest(spec=spec, view=pb.RESULT_VIEW_FULL)
    rollout = (await stub.RunRollout(request)).rollout
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, (
        rollout.result.error,
        rollout.result.agent_log_tail,
    )
    return rollout


@pytest.mark.parametrize("path", sorted(DIALECTS))
async def test_each_dialect_exports_a_valid_trajectory_with_exact_tokens(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream, path: str
) -> None:
    upstream.script(Reply(tool_calls=[ToolCallReply("lookup", '{"q": "x"}')]), Reply(text=ANSWER))
    command = TWO_CALLS.format(path=path, system=SYSTEM, question=QUESTION, result=RESULT)
    spec = command_spec(command, verify=(f"true {path}",), endpoint=_endpoint(upstream))
    rollout = await _run(stub, spec)
    assert [t.dialect for t in rollout.result.turns] == [DIALECTS[path]] * 2

    document = valid_atif(rollout)

    assert document["session_id"] == rollout.id
    assert document["agent"] == {"name": "command", "version": "unknown", "model_name": MODEL}
    assert [(s["source"], s["message"]) for s in document["steps"][:2]] == [
        ("system", SYSTEM),
        ("user", QUESTION),
    ]
    asked, answered = agent_steps(document)
    [call] = asked["tool_calls"]
    assert (call["function_name"], call["arguments"]) == ("lookup", {"q": "x"})
    assert asked["observation"] == {
        "results": [{"source_call_id": call["tool_call_id"], "content": RESULT}]
    }
    assert answered["message"] == ANSWER
    assert len(document["steps"]) == 4  # the assistant echo in the 2nd request is no step
    for step, sent in zip((asked, answered), upstream.sent, strict=True):
        assert_exact_tokens(step["metrics"], sent)
        assert step["extra"]["trainable"] is True
        assert "policy_version_start" not in step["extra"]  # no version was ever set
        assert step["extra"]["dialect"] == pb.Dialect.Name(DIALECTS[path]).removeprefix("DIALECT_")
    assert document["final_metrics"]["total_completion_tokens"] == sum(
        len(s.completion_token_ids) for s in upstream.sent
    )
    assert document["extra"]["reward"] == 1.0
    assert "policy_version_min" not in document["extra"]
    assert_train_records(rollout, upstream.sent)


async def test_odd_calls_and_missing_logprobs_still_export_valid_files(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    odd = ToolCallReply("lookup", "not json")
    upstream.script(Reply(text="Trying.", tool_calls=[odd], tool_call_logprobs=False))
    upstream.script(Reply(text=ANSWER, reasoning="the result says 42"))
    rollout = await _run(stub, command_spec(ODD_CALLS, endpoint=_endpoint(upstream)))
    first = rollout.result.turns[0]
    assert not first.logprobs_present

    document = valid_atif(rollout)

    asked, answered = agent_steps(document)
    assert (answered["message"], answered["reasoning_content"]) == (ANSWER, "the result says 42")
    assert_exact_tokens(answered["metrics"], upstream.sent[1])  # reasoning tokens included
    [call] = asked["tool_calls"]
    assert call["arguments"] == {}
    assert asked["extra"]["unparsed_tool_arguments"] == {call["tool_call_id"]: "not json"}
    assert asked["observation"]["results"] == [
        {"source_call_id": call["tool_call_id"], "content": "real"}
    ]
    # Logprobs left out rather than misaligned; the ids stay exact.
    assert "logprobs" not in asked["metrics"]
    assert asked["metrics"]["extra"]["logprobs_present"] is False
    assert asked["metrics"]["completion_token_ids"] == upstream.sent[0].completion_token_ids
    ghost = next(s for s in document["steps"] if s["extra"].get("tool_call_id") == "call_ghost")
    assert (ghost["source"], ghost["message"]) == ("user", "ghost")
    assert document["steps"][0]["message"] == "odd\ncalls"  # text parts, one per line

    record = to_train_records(rollout)[0]
    # Never invented: fewer logprobs than tokens (the capture may keep none), each one sent.
    assert len(record["logprobs"]) < len(record["completion_token_ids"])
    assert set(record["logprobs"]) <= set(upstream.sent[0].logprobs)
    assert record["logprobs_present"] is False
    assert len(record["loss_mask"]) == len(record["prompt_token_ids"]) + len(
        record["completion_token_ids"]
    )


async def test_a_rollout_without_model_calls_exports_its_task_alone(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    rollout = await _run(stub, command_spec("true"))

    document = valid_atif(rollout)

    assert [(s["source"], s["message"]) for s in document["steps"]] == [("user", "do the task")]
    assert "no model calls" in document["notes"]
    assert to_train_records(rollout) == []
    assert render(rollout, ExportFormat.TRAIN) == ""


async def test_policy_versions_reach_both_exports(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    """A version set before the rollout holds for its calls; one set while a call streams
    is that call's end version (the upstream holds the stream until released)."""
    selector = pb.ModelCallSelector(endpoint=pb.EndpointSelector(base_url=upstream.base_url))
    await stub.SetPolicyVersion(pb.SetPolicyVersionRequest(selector=selector, version=7))
    upstream.script(Reply(text="held", hold_after_first=True), Reply(text=ANSWER))
    command = STREAM_THEN_CALL
    running = asyncio.create_task(_run(stub, command_spec(command, endpoint=_endpoint(upstream))))
    await eventually(lambda: len(upstream.requests) == 1)
    await stub.SetPolicyVersion(pb.SetPolicyVersionRequest(selector=selector, version=8))
    upstream.release()
    rollout = await running

    versions = [(7, 8), (8, 8)]
    document = valid_atif(rollout)
    got = [
        (s["extra"]["policy_version_start"], s["extra"]["policy_version_end"])
        for s in agent_steps(document)
    ]
    assert got == versions
    assert document["extra"]["policy_version_min"] == 7
    assert document["extra"]["policy_version_max"] == 8
    records = to_train_records(rollout)
    assert [(r["policy_version_start"], r["policy_version_end"]) for r in records] == versions
    assert_train_records(rollout, upstream.sent)


@pytest.mark.opencode
async def test_opencode_exports_a_valid_trajectory_and_masks_its_title_call(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream
) -> None:
    arguments = json.dumps({"filePath": "hello.txt", "content": "hi"})
    upstream.script(Reply(tool_calls=[ToolCallReply("write", arguments)]), match=has_tools)
    spec = pb.RolloutSpec(
        task=pb.Task(instruction="Create hello.txt.", verify=["grep -qx hi hello.txt"]),
        agent=pb.Agent(name="opencode"),
        endpoint=pb.Endpoint(base_url=upstream.base_url, api_key=KEY, model=MODEL),
    )
    rollout = await _run(stub, spec)
    turns = list(rollout.result.turns)
    assert [t.trainable for t in turns].count(False) == 1  # the title call

    document = valid_atif(rollout)

    assert document["agent"]["name"] == "opencode"
    steps = agent_steps(document)
    assert [s["extra"]["trainable"] for s in steps] == [t.trainable for t in turns]
    title_index = next(t.index for t in turns if not t.trainable)
    title_steps = [s for s in document["steps"] if s["extra"]["turn_index"] == title_index]
    assert len(title_steps) >= 2  # its prompt and its answer, all marked
    assert {s["extra"]["trainable"] for s in title_steps} == {False}
    by_ids = {tuple(s.prompt_token_ids): s for s in upstream.sent}  # calls may interleave
    for step in steps:
        assert_exact_tokens(step["metrics"], by_ids[tuple(step["metrics"]["prompt_token_ids"])])
    writes = [c for s in steps for c in s.get("tool_calls", ()) if c["function_name"] == "write"]
    assert [c["arguments"] for c in writes] == [json.loads(arguments)]
    assert any(
        s["source"] == "user" and "Create hello.txt." in s["message"] for s in document["steps"]
    )
    ordered = [by_ids[tuple(t.prompt_token_ids)] for t in turns]
    assert_train_records(rollout, ordered)
    title = next(r for r in to_train_records(rollout) if not r["trainable"])
    assert title["completion_token_ids"]
    assert set(title["loss_mask"]) == {0}


async def test_the_export_command_writes_atif_and_train_records(
    stub: pb_grpc.RolloutServiceAsyncStub,
    upstream: FakeUpstream,
    server_target: str,
    tmp_path: Path,
) -> None:
    command = TWO_CALLS.format(
        path="chat/completions", system=SYSTEM, question=QUESTION, result=RESULT
    )
    upstream.script(Reply(tool_calls=[ToolCallReply("lookup", '{"q": "x"}')]), Reply(text=ANSWER))
    rollout = await _run(stub, command_spec(command, endpoint=_endpoint(upstream)))
    runner = CliRunner()
    target = ["--target", server_target]

    written = tmp_path / "trajectory.json"
    result = runner.invoke(
        app,
        ["export", rollout.id, "--output", str(written), *target],  # ATIF, the default
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert written.read_text() == render(rollout, ExportFormat.ATIF)
    assert harbor_validation_error(written.read_text()) is None

    result = runner.invoke(app, ["export", rollout.id, "--format", "train", *target])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["completion_token_ids"] for r in records] == [
        s.completion_token_ids for s in upstream.sent
    ]

    unwritable = tmp_path / "missing" / "trajectory.json"
    result = runner.invoke(
        app, ["export", rollout.id, "--format", "atif", "--output", str(unwritable), *target]
    )
    assert result.exit_code == EXIT_ERROR
    assert f"--output {unwritable}: No such file or directory" in result.stderr

    result = runner.invoke(app, ["export", "no-such-rollout", "--format", "atif", *target])
    assert result.exit_code == EXIT_ERROR
    assert "not found" in result.stderr
    result = runner.invoke(app, ["export", rollout.id, "--format", "csv", *target])
    assert result.exit_code == 2
    assert "--format" in result.stderr
