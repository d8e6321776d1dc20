"""Harbor's own released CLI (`harbor run`, in .harbor-venv: `make harbor-venv`) running its
agents in this service's sessions through `rollout_client.harbor_env`, against a real server:
the oracle earns 1, the no-op agent 0; Harbor's installed claude-code and codex agents,
preinstalled by the task's Dockerfile, each earn 1 with the scripted upstream's answers, their
every model call a turn of the session with the upstream's exact token data; the session's
ATIF export is valid under Harbor's own trajectory models; an unreachable server, a bad token
and an unknown task each fail the trial at start with one line."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout_client.aio import AsyncRolloutClient

from service.proxy.access import host_socket_access
from testing.fakes.llm_upstream import FakeUpstream, Reply, ToolCallReply, has_tools
from testing.harbor_offline import HARBOR_OFFLINE_ENV
from testing.server_process import ServerProcess, running
from tests.docs.pages import marked_blocks
from tests.export.checks import (
    HARBOR_PYTHON,
    agent_steps,
    assert_exact_tokens,
    harbor_validation_error,
    require_harbor,
    valid_atif,
)

TASKS = Path(__file__).parent / "tasks"
ENVIRONMENT = "rollout_client.harbor_env:RolloutEnvironment"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
TOKEN = "harbor-env-token-5b1e"
UPSTREAM_KEY = "sk-harbor-upstream-secret-93d2"
UPSTREAM_MODEL = "fake-policy-harbor"
BLOCKS = marked_blocks()

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server"),
]


@pytest.fixture(autouse=True, scope="module")
def _harbor_installed() -> None:
    require_harbor()  # skipped without .harbor-venv, failed so under CI


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # Harbor uploads the task directory (harbor_task.archive): its Dockerfile is built only
    # when the operator trusts uploads.
    env = {"ROLLOUT_HARBOR_UPLOAD_BUILDS": "true"}
    process = ServerProcess(tmp_path_factory.mktemp("harbor-env-state"), env=env)
    with running(process):
        yield process


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with a bearer token and one task root (`srv-tasks`) holding no task."""
    root = tmp_path_factory.mktemp("harbor-env-roots") / "srv-tasks"
    root.mkdir()
    env = {
        "ROLLOUT_AUTH_TOKENS": json.dumps([TOKEN]),
        "ROLLOUT_TASK_ROOTS": json.dumps([str(root)]),
    }
    process = ServerProcess(tmp_path_factory.mktemp("harbor-env-guarded-state"), env=env)
    with running(process):
        yield process


def dataset_of(root: Path, task: str) -> Path:
    """A one-task dataset; an image build's TLS trusts the host's CA bundle beside it."""
    shutil.copytree(TASKS / task, root / task)
    shutil.copy(HOST_CA, root / task / "environment" / "host-ca.crt")
    return root


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dataset_of(tmp_path_factory.mktemp("harbor-dataset"), "needs_root")


def harbor_run(
    dataset: Path,
    jobs: Path,
    agent: str,
    target: str,
    *options: str,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`harbor run` of the dataset, `options` being more `--ek`, `-m` ...; its one trial's
    result, with the trial's directory."""
    command = [
        str(HARBOR_PYTHON), "-m", "harbor.cli.main", "run", "-p", str(dataset), "-a", agent,
        "-o", str(jobs), "-n", "1", "--env", ENVIRONMENT, "--ek", f"target={target}", *options,
    ]  # fmt: skip
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
        env={**os.environ, **HARBOR_OFFLINE_ENV, **(env or {})},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (trial,) = [p for p in jobs.glob("*/*") if p.is_dir()]
    result: dict[str, Any] = json.loads((trial / "result.json").read_text())
    result["trial_dir"] = trial
    return result


def reward_of(result: dict[str, Any]) -> float | None:
    verifier = result.get("verifier_result") or {}
    rewards = verifier.get("rewards") or {}
    reward = rewards.get("reward")
    return None if reward is None else float(reward)


def assert_valid_atif(trial_dir: Path) -> dict[str, Any]:
    """The session's record, its ATIF export valid under Harbor's own `Trajectory` model."""
    record: dict[str, Any] = json.loads((trial_dir / "rollout-session.json").read_text())
    assert harbor_validation_error(json.dumps(record["trajectory"])) is None
    return record


def start_failure(result: dict[str, Any]) -> str:
    """The message of a trial that failed in the environment's start."""
    info = result["exception_info"]
    assert "in start" in info["exception_traceback"], info["exception_traceback"]
    message: str = info["exception_message"]
    return message


@pytest.mark.parametrize(("agent", "reward"), [("oracle", 1.0), ("nop", 0.0)])
def test_harbor_run_earns_the_reward_of_its_agent(
    server: ServerProcess, dataset: Path, tmp_path: Path, agent: str, reward: float
) -> None:
    result = harbor_run(dataset, tmp_path / "jobs", agent, server.target)
    assert result.get("exception_info") is None, result["exception_info"]
    assert reward_of(result) == reward
    record = assert_valid_atif(result["trial_dir"])
    assert record["status"] == "CLOSED"


def test_an_unreachable_server_fails_the_trial_at_start_in_one_line(
    dataset: Path, tmp_path: Path
) -> None:
    result = harbor_run(dataset, tmp_path / "jobs", "nop", "127.0.0.1:1")
    message = result["exception_info"]["exception_message"]
    assert message == (
        "rollout-service at 127.0.0.1:1 is unreachable (no connection in 10s): "
        "is the server running?"
    )


def test_a_bad_token_fails_the_trial_at_start_in_one_line(
    guarded_server: ServerProcess, dataset: Path, tmp_path: Path
) -> None:
    target = guarded_server.target
    result = harbor_run(dataset, tmp_path / "jobs", "nop", target, "--ek", "token=not-the-token")
    assert start_failure(result) == (
        f"opening a session at {target}: UNAUTHENTICATED: invalid bearer token"
    )


def test_an_unknown_task_fails_the_trial_at_start_in_one_line(
    guarded_server: ServerProcess, dataset: Path, tmp_path: Path
) -> None:
    target = guarded_server.target
    options = ("--ek", f"token={TOKEN}", "--ek", "task_root=srv-tasks")
    result = harbor_run(dataset, tmp_path / "jobs", "nop", target, *options)
    assert start_failure(result) == (
        f"opening a session at {target}: INVALID_ARGUMENT: spec.harbor_task.path: "
        "no task directory 'srv-tasks/needs_root' under the task root 'srv-tasks'"
    )


def test_each_operation_does_what_harbor_asks_or_refuses_in_one_line(
    server: ServerProcess, dataset: Path, tmp_path: Path
) -> None:
    """The environment's calls made directly, as a trial makes them (`environment_ops.py` in
    Harbor's venv): exec's cwd, env, streams, exit code and timeout; uploads and downloads of
    files and directories, modes kept; and what it cannot do refused, never ignored."""
    driver = Path(__file__).with_name("environment_ops.py")
    argv = [str(HARBOR_PYTHON), str(driver), server.target, str(dataset / "needs_root")]
    done = subprocess.run(
        [*argv, str(tmp_path)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])

    assert seen["compose"].startswith("SessionEnvironmentError: compose-task: docker-compose")
    assert seen["capabilities"] == {"disable_internet": True, "gpus": False, "mounted": False}
    assert seen["cwd"] == "/tmp"
    assert seen["env"] == "hi there"
    assert seen["streams"] == ["out\n", "err\n", 7]
    assert seen["timeout"] == "TimeoutError: command timed out after 1 seconds: sleep 60"
    assert seen["user"].startswith("SessionEnvironmentError: exec as user 'somebody-else':")
    assert seen["uploaded"] == ["alpha\nalpha\nran\n", 0]
    assert seen["downloaded_file"] == "alpha\n"
    assert seen["downloaded_dir"] == {"deep/d.txt": ["deep\n", False]}
    assert seen["missing"].startswith("FileNotFoundError: /tmp/no-such-file")
    assert seen["after_stop"] == "SessionEnvironmentError: the environment is not started"
    assert seen["network"] == "NETWORK_POLICY_FULL"  # Harbor's default, network_mode public
    assert seen["bounded"] == ["NETWORK_POLICY_NONE", 1536]
    # --ek verify=true: the session verified by the service's own rules at stop.
    assert seen["solved"] == 0
    assert seen["verified"] == ["VERIFIED", 1.0]


@dataclass(frozen=True)
class InstalledAgent:
    """How one of Harbor's installed agents is driven here."""

    provider: str
    """Harbor's provider prefix of the model (`-m provider/model`)."""
    key_variable: str
    """The provider key Harbor wants set before it starts; the route's key replaces it in the
    sandbox, so the value reaches nothing."""
    dialect: pb.Dialect
    """What the agent speaks to the route (the route translates it to chat completions)."""
    tool: str
    arguments: dict[str, str]
    """The scripted call that writes the file."""


INSTALLED_AGENTS = {
    # claude-code reads ANTHROPIC_BASE_URL, which every exec sets to the route; its Write tool
    # wants an absolute path.
    "claude-code": InstalledAgent(
        "anthropic",
        "ANTHROPIC_API_KEY",
        pb.DIALECT_MESSAGES,
        "Write",
        {"file_path": "/app/hello.txt", "content": "hello from harbor\n"},
    ),
    # codex reads its base URL only from the config.toml Harbor writes: its config names the
    # route (`codex_config`); its shell tool is exec_command.
    "codex": InstalledAgent(
        "openai",
        "OPENAI_API_KEY",
        pb.DIALECT_RESPONSES,
        "exec_command",
        {"cmd": "echo 'hello from harbor' > /app/hello.txt"},
    ),
}


def codex_config(path: Path) -> Path:
    """The codex config.toml docs/harbor-environment.md gives: its one model provider is the
    route of a local sandbox."""
    config = BLOCKS["harbor-codex-config"].code
    assert f'base_url = "{host_socket_access().base_url}"' in config
    path.write_text(config)
    return path


@pytest.mark.parametrize("name", sorted(INSTALLED_AGENTS))
async def test_an_installed_agent_earns_its_reward_and_each_model_call_is_a_turn(
    server: ServerProcess, tmp_path: Path, name: str
) -> None:
    agent = INSTALLED_AGENTS[name]
    dataset = dataset_of(tmp_path / "dataset", "installed_agents")
    write = Reply(
        reasoning="The task wants one file written.",
        tool_calls=[ToolCallReply(agent.tool, json.dumps(agent.arguments))],
    )
    options = [
        "-m", f"{agent.provider}/{UPSTREAM_MODEL}", "--ek", "model=" + UPSTREAM_MODEL,
        "--ek", "api_key_env=HARBOR_TEST_UPSTREAM_KEY",
    ]  # fmt: skip
    if name == "codex":
        options += ["--ak", f"config={codex_config(tmp_path / 'codex.toml')}"]
    env = {"HARBOR_TEST_UPSTREAM_KEY": UPSTREAM_KEY, agent.key_variable: "sk-harbor-unused"}
    # After the tool's result the upstream's default answer ends the agent's loop.
    async with FakeUpstream(api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL) as upstream:
        upstream.script(write, match=has_tools)
        options += ["--ek", f"base_url={upstream.base_url}"]
        result = await asyncio.to_thread(
            harbor_run, dataset, tmp_path / "jobs", name, server.target, *options, env=env
        )
    assert result.get("exception_info") is None, result["exception_info"]
    assert reward_of(result) == 1.0
    record = assert_valid_atif(result["trial_dir"])
    client = AsyncRolloutClient(server.target)
    try:
        rollout = await client.get(record["session_id"], view=pb.RESULT_VIEW_FULL)
    finally:
        await client.close()
    turns = list(rollout.result.turns)
    assert len(turns) == len(upstream.sent) == record["turns"] >= 2  # the write, then the end
    assert {t.dialect for t in turns} == {agent.dialect}
    document = valid_atif(rollout)
    assert record["trajectory"] == document
    steps = agent_steps(document)
    assert [call["function_name"] for call in steps[0]["tool_calls"]] == [agent.tool]
    for step, sent in zip(steps, upstream.sent, strict=True):
        assert_exact_tokens(step["metrics"], sent)
    assert all(r.headers["authorization"] == f"Bearer {UPSTREAM_KEY}" for r in upstream.requests)
    for path in result["trial_dir"].rglob("*"):
        assert not path.is_file() or UPSTREAM_KEY.encode() not in path.read_bytes(), path
    assert UPSTREAM_KEY not in server.text()
