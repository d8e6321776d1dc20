"""examples/train_loop.py as a trainer runs it: a subprocess against the real server, the
command agent calling the scripted upstream through the proxy, two steps of groups of two.

The upstream answers each task's members "right" then "wrong" (one queue per task, matched
by the task's marker in the prompt), so every group has one reward of 1 and one of 0 and the
advantages are not all zero.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from rollout.v1 import rollout_pb2 as pb
from rollout_client import AsyncRolloutClient
from rollout_client.batch import BatchResult

from examples.train_loop import EPS, RUN_LABEL, group_advantages
from testing.fakes.llm_upstream import FakeUpstream, Reply
from testing.server_process import ServerProcess
from testing.specs import command_spec
from tests.examples.batch_checks import assert_group_normalised, assert_mask_lines_up, read_lines

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_loop.py"
MODEL = "policy-in-training"
TASKS = ("task-a", "task-b")
GROUP = 2
STEPS = 2


def answer_call(marker: str) -> str:
    """A scripted agent: asks the model once and writes its answer into answer.txt."""
    return f"""python3 - <<'PY'
import json, os, urllib.request
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({{"model": os.environ["OPENAI_MODEL"], "messages": [
        {{"role": "user", "content": "{marker}: right or wrong?"}}]}}).encode(),
    headers={{"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"}})
body = json.loads(urllib.request.urlopen(request, timeout=120).read())
open("answer.txt", "w").write(body["choices"][0]["message"]["content"].strip() + "\\n")
PY"""


def asks_about(marker: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda body: marker in json.dumps(body.get("messages"))


def write_dataset(path: Path, upstream: FakeUpstream) -> Path:
    lines = []
    for task in TASKS:
        spec = command_spec(
            answer_call(task),
            verify=("grep -qx right answer.txt",),
            endpoint={"base_url": upstream.base_url, "model": MODEL},
            task_id=task,
        )
        lines.append(json.dumps(json_format.MessageToDict(spec)))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(model=MODEL) as upstream:
        for task in TASKS:  # each step's group of two takes one of each
            upstream.script(
                *[Reply(text=t) for t in ("right", "wrong") * STEPS], match=asks_about(task)
            )
        yield upstream


async def run_example(*args: str) -> None:
    """The example as a subprocess (the upstream keeps serving in this event loop)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await process.communicate()
    assert process.returncode == 0, output.decode()


async def test_two_steps_of_groups_train_on_exact_tokens_and_sync_weights(
    server_process: ServerProcess, upstream: FakeUpstream, tmp_path: Path
) -> None:
    run_id = uuid.uuid4().hex[:12]
    output = tmp_path / "run"
    dataset = write_dataset(tmp_path / "tasks.jsonl", upstream)
    await run_example(
        "--target", server_process.target, "--dataset", str(dataset), "--run-id", run_id,
        "--group-size", str(GROUP), "--steps", str(STEPS), "--output", str(output),
    )  # fmt: skip

    # Every rollout of the run ended and was counted: none lost to the pause and resume.
    async with AsyncRolloutClient(server_process.target) as client:
        ran = [r async for r in client.list_all(labels={RUN_LABEL: run_id})]
    assert len(ran) == STEPS * len(TASKS) * GROUP
    assert {pb.RolloutStatus.Name(r.status) for r in ran} == {"ROLLOUT_STATUS_SUCCEEDED"}
    steps = read_lines(output / "steps.jsonl")
    assert [s["step"] for s in steps] == list(range(STEPS))
    for summary in steps:
        assert summary["rollouts"] == summary["trained_rollouts"] == len(TASKS) * GROUP
        assert summary["outcomes"] == {"scored": len(TASKS) * GROUP}
        assert (summary["lines"], summary["turns_without_tokens"]) == (len(TASKS) * GROUP, 0)
        assert summary["policy_version"] == summary["step"] + 1
        # The steps do not overlap: nothing was live to hold, nothing was left held.
        assert summary["paused"] == {"rollouts": 0, "calls_finished": 0, "calls_aborted": 0}
        assert summary["resumed"] == {"rollouts": 0, "calls_released": 0}

    sent = {tuple(s.completion_token_ids): s.logprobs for s in upstream.sent}
    for step in range(STEPS):
        lines = read_lines(output / f"step-{step:04d}.jsonl")
        assert len(lines) == len(TASKS) * GROUP  # one trainable turn per rollout
        assert_aligned_with_upstream(lines, sent)
        rewards = assert_group_normalised(lines)
        assert list(rewards.values()) == [[0.0, 1.0]] * len(TASKS)
        # Step 0 ran before any version was set; step 1 after the sync set version 1.
        expected = None if step == 0 else step
        versions = {(line["policy_version_start"], line["policy_version_end"]) for line in lines}
        assert versions == {(expected, expected)}


def assert_aligned_with_upstream(
    lines: list[dict[str, Any]], sent: dict[tuple[int, ...], list[float]]
) -> None:
    """The completion's ids and logprobs are exactly what the upstream sent."""
    for line in lines:
        completion = assert_mask_lines_up(line)
        assert completion in sent
        assert line["logprobs"] == pytest.approx(sent[completion], abs=1e-6)  # float32 wire


def test_infrastructure_losses_and_rewardless_members_are_left_out_of_the_group() -> None:
    def member(
        rollout_id: str, group: str, reward: float | None, outcome: str = "scored"
    ) -> BatchResult:
        return BatchResult(
            task="t", member=0, outcome=outcome, status="", rollout_id=rollout_id,
            group=group, reward=reward,
        )  # fmt: skip

    advantages = group_advantages(
        [
            member("a1", "a", 1.0),
            member("a2", "a", 0.0),
            member("a3", "a", None, "infrastructure"),
            member("a4", "a", 1.0, "infrastructure"),  # a reward from a lost rollout: not used
            member("a5", "a", None),
            member("b1", "b", 0.5),  # alone in its group: nothing to compare with
            member("lone", "", 0.25),  # a lone rollout is its own group
        ]
    )
    spread = 0.5 / (0.5 + EPS)
    assert advantages == {"a1": spread, "a2": -spread, "b1": 0.0, "lone": 0.0}
