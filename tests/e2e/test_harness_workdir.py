"""Every packaged harness starts in the task's workdir, with the task's env, as Harbor runs
agents: a Harbor task whose Dockerfile ends `WORKDIR /app` reaches reward 1 with each.

Through the real server: the task's image built by the server's store (a WORKDIR step, no
RUN), a real local sandbox on it, the real capture proxy and a scripted upstream whose model
has the harness run one shell command, `printf ... "$ANSWER_WORD" > answer.txt`: a
relative path and a variable of the task's env. The task's test reads /app/answer.txt. On
main every harness but the command agent started in /home/user/workdir: reward 0.

What is collected from /app is the answer alone: none of the harness's config, install or
state is in the task's workdir.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from testing.server_process import ServerProcess, running

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.agents,
    pytest.mark.timeout(900),  # a harness's first use installs it from npm or PyPI
    pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server"),
]

UPSTREAM_KEY = "sk-harness-workdir-upstream-3c7a"
UPSTREAM_MODEL = "fake-policy-workdir"
ANSWER = "forty-two"
WRITE = 'printf "%s\\n" "$ANSWER_WORD" > answer.txt'
TASK = "workdir_app"
TASK_FILES = {
    "environment/Dockerfile": "FROM rollout/base\nWORKDIR /app\n",
    "task.toml": f"""schema_version = "1.1"

[agent]
timeout_sec = 300.0

[verifier]
timeout_sec = 60.0

[environment]
env = {{ ANSWER_WORD = "{ANSWER}" }}
""",
    "instruction.md": "Write the value of $ANSWER_WORD into answer.txt.\n",
    "tests/test.sh": f"""#!/bin/bash
if [ "$(cat /app/answer.txt 2>/dev/null)" = {ANSWER} ]; then reward=1; else reward=0; fi
echo "$reward" > /logs/verifier/reward.txt
""",
}


def _call(name: str, **arguments: str) -> Reply:
    return Reply(tool_calls=[ToolCallReply(name, json.dumps(arguments))])


SCRIPTS: dict[str, tuple[Reply, ...]] = {
    "opencode": (_call("bash", command=WRITE, description="Write the answer"),),
    "claude-code": (_call("Bash", command=WRITE, description="Write the answer"),),
    "codex": (_call("exec_command", cmd=WRITE),),
    "mini-swe-agent": (
        _call("bash", command=WRITE),
        _call("bash", command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
    ),
}
"""Each harness's own shell tool, as its dialect names it, running WRITE."""
TOLD = {
    "opencode": "Working directory: /app",
    "claude-code": "Primary working directory: /app",
    "codex": "<cwd>/app</cwd>",
}
"""How a harness's prompt names its working directory (mini-swe-agent's does not)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("harness-workdir") / "tasks"
    for name, text in TASK_FILES.items():
        path = root / TASK / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    server = ServerProcess(
        tmp_path_factory.mktemp("harness-workdir-state"),
        env={"ROLLOUT_TASK_ROOTS": json.dumps([str(Path(root))])},
    )
    with running(server):
        yield server


@pytest.fixture
async def stub(server: ServerProcess) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL) as upstream:
        yield upstream


@pytest.mark.parametrize("agent", sorted(SCRIPTS))
async def test_a_harness_works_in_the_tasks_workdir_with_its_env(
    stub: pb_grpc.RolloutServiceAsyncStub, upstream: FakeUpstream, agent: str
) -> None:
    upstream.script(*SCRIPTS[agent], match=has_tools)
    spec = pb.RolloutSpec(
        harbor_task=pb.HarborTask(path=TASK),
        agent=pb.Agent(name=agent),
        endpoint=pb.Endpoint(
            base_url=upstream.base_url, api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL
        ),
    )

    rollout = (await stub.RunRollout(pb.RunRolloutRequest(spec=spec))).rollout

    assert rollout.spec.task.workdir == "/app"  # from the Dockerfile's WORKDIR
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, (
        rollout.result.error,
        rollout.result.agent_log_tail,
    )
    assert rollout.result.reward == 1.0, rollout.result.agent_log_tail
    assert any(t.trainable for t in rollout.result.turns)
    # The answer is all that is in /app: the harness's own files are elsewhere.
    assert dict(rollout.result.files) == {"answer.txt": f"{ANSWER}\n".encode()}
    assert not rollout.result.files_omitted
    # What the harness tells its model about where it is (the symptom).
    prompts = [json.dumps(r.body) for r in upstream.requests]
    assert not any("/home/user/workdir" in prompt for prompt in prompts)
    if agent in TOLD:
        assert any(TOLD[agent] in prompt for prompt in prompts)
