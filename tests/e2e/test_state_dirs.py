"""A task whose workdir is HOME: what is collected is the task's files, none of the harness's.

Through the real server, with real opencode and a scripted upstream whose model runs one
shell command. opencode keeps its config, data and logs in `~/.opencode-xdg`, inside a
workdir of /home/user (or /home); collection skips the agent's `state_dirs`, which
before landed in the result as `.opencode-xdg/...` files.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.opencode,
    pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server"),
]

UPSTREAM_KEY = "sk-state-dirs-upstream-51d2"
UPSTREAM_MODEL = "fake-policy-state"
WRITE = "printf 'forty-two\\n' > answer.txt"


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL) as upstream:
        yield upstream


@pytest.mark.parametrize("workdir", ["/home/user", "/home"])
async def test_a_workdir_at_home_collects_only_the_tasks_files(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream, workdir: str
) -> None:
    arguments = json.dumps({"command": WRITE, "description": "Write the answer"})
    upstream.script(Reply(tool_calls=[ToolCallReply("bash", arguments)]), match=has_tools)
    spec = pb.RolloutSpec(
        task=pb.Task(
            instruction="Write forty-two into answer.txt.",
            workdir=workdir,
            files={"notes.txt": b"the task's own file\n"},
            # opencode's state was in the workdir: it is there, and was not collected.
            verify=["grep -qx forty-two answer.txt", "test -d /home/user/.opencode-xdg"],
        ),
        agent=pb.Agent(name="opencode"),
        sandbox=pb.SandboxSpec(image="rollout/base"),  # a workdir outside HOME needs an image
        endpoint=pb.Endpoint(
            base_url=upstream.base_url, api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL
        ),
    )

    rollout = (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout

    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, (
        rollout.result.error,
        rollout.result.agent_log_tail,
    )
    assert rollout.result.reward == 1.0
    assert dict(rollout.result.files) == {
        "notes.txt": b"the task's own file\n",
        "answer.txt": b"forty-two\n",
    }
    assert not rollout.result.files_omitted
