"""The `rollout` command line against the real server (local bwrap sandboxes)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout_client import RolloutClient
from rollout_client.cli import EXIT_CODES, EXIT_ERROR, app
from typer.testing import CliRunner, Result

from tests.client.conftest import cli_argv

pytestmark = pytest.mark.e2e

SUCCEEDED = EXIT_CODES[pb.ROLLOUT_STATUS_SUCCEEDED]
FAILED = EXIT_CODES[pb.ROLLOUT_STATUS_FAILED]
TIMED_OUT = EXIT_CODES[pb.ROLLOUT_STATUS_TIMED_OUT]
CANCELLED = EXIT_CODES[pb.ROLLOUT_STATUS_CANCELLED]
SPEC_YAML = """\
task:
  instruction: copy a.txt to b.txt
  setup: ["echo hi > a.txt"]
  verify: ["test -f b.txt"]
agent:
  name: command
  command: "cat a.txt > b.txt; echo copied"
"""

runner = CliRunner()


def rollout(target: str, *args: str) -> Result:
    return runner.invoke(app, [*args, "--target", target])


def test_run_a_spec_file_shows_progress_and_succeeds(server_target: str, tmp_path: Path) -> None:
    spec_file = tmp_path / "copy.yaml"
    spec_file.write_text(SPEC_YAML)
    result = rollout(server_target, "run", str(spec_file), "--label", f"run={uuid.uuid4().hex}")
    assert result.exit_code == SUCCEEDED, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("rollout ")
    assert lines[0].endswith(" started")
    for expected in ("phase SETUP", "setup[0] ok   echo hi > a.txt", "phase AGENT"):
        assert any(expected in line for line in lines), expected
    assert any(line.endswith("agent | copied") for line in lines)
    assert any("verify[0] ok   test -f b.txt" in line for line in lines)
    assert any(line.endswith("finished SUCCEEDED") for line in lines)
    assert any(line.endswith("SUCCEEDED  reward 1") for line in lines)


def test_run_with_flags_only_and_json_output(server_target: str) -> None:
    result = rollout(
        server_target,
        "run",
        "--instruction", "make b.txt",
        "--setup", "echo hi > a.txt",
        "--agent-command", "cp a.txt b.txt",
        "--verify", "test -f b.txt",
        "--verify", "grep -q hi b.txt",
        "--json",
    )  # fmt: skip
    assert result.exit_code == SUCCEEDED, result.output
    document = json.loads(result.stdout)
    assert document["status"] == "ROLLOUT_STATUS_SUCCEEDED"
    assert document["result"]["reward"] == 1.0
    assert len(document["result"]["verifyResults"]) == 2


def test_a_failed_setup_exits_with_the_failed_code(server_target: str) -> None:
    result = rollout(
        server_target, "run", "--instruction", "x", "--setup", "exit 3", "--agent-command", "true"
    )
    assert result.exit_code == FAILED, result.output
    assert "error SETUP" in result.stdout


def test_an_agent_past_its_timeout_exits_with_the_timed_out_code(server_target: str) -> None:
    result = rollout(
        server_target,
        "run",
        "--instruction", "x",
        "--agent-command", "sleep 60",
        "--timeout", "1",
        "--verify", "true",
    )  # fmt: skip
    assert result.exit_code == TIMED_OUT, result.output
    assert "verify[0] ok" in result.stdout, "verification still runs after the timeout"


def test_watch_get_list_and_cancel(server_target: str) -> None:
    label = f"run={uuid.uuid4().hex}"
    with RolloutClient(server_target) as client:
        done = client.run({**_spec("true"), "labels": dict([label.split("=")])})
        sleeping = client.start({**_spec("sleep 60"), "labels": dict([label.split("=")])})

    watched = rollout(server_target, "watch", done.id, "--json")
    assert watched.exit_code == SUCCEEDED, watched.output
    events = [json.loads(line) for line in watched.stdout.splitlines()]
    assert [int(e["seq"]) for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["finished"]["status"] == "ROLLOUT_STATUS_SUCCEEDED"

    got = rollout(server_target, "get", done.id, "--json")
    assert json.loads(got.stdout)["id"] == done.id

    listed = rollout(server_target, "list", "--label", label, "--json")
    assert [r["id"] for r in json.loads(listed.stdout)["rollouts"]] == [sleeping.id, done.id]
    table = rollout(server_target, "list", "--label", label, "--status", "succeeded")
    assert done.id in table.stdout
    assert sleeping.id not in table.stdout

    cancelled = rollout(server_target, "cancel", sleeping.id)
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.startswith(f"rollout {sleeping.id}: ")
    watched = rollout(server_target, "watch", sleeping.id)
    assert watched.exit_code == CANCELLED, watched.output
    assert "finished CANCELLED" in watched.stdout


def test_errors_from_the_server_are_one_line(server_target: str) -> None:
    invalid = rollout(server_target, "run", "--instruction", "", "--agent-command", "true")
    assert invalid.exit_code == EXIT_ERROR
    [line] = invalid.stderr.splitlines()
    assert line.startswith("error: invalid request: ")
    assert "spec.task.instruction" in line

    missing = rollout(server_target, "get", "no-such-rollout")
    assert missing.exit_code == EXIT_ERROR
    assert missing.stderr.startswith("error: not found: ")


def test_ctrl_c_cancels_the_rollout(server_target: str) -> None:
    command = cli_argv(
        "run", "--instruction", "x", "--agent-command", "sleep 60", "--target", server_target
    )
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    first = process.stdout.readline()
    rollout_id = first.split()[1]
    # The CLI printing the AGENT phase is inside its Ctrl-C handling (`_run_live`) and the
    # rollout is past admission: the interrupt lands where the test means it to.
    seen = [first]
    for line in process.stdout:
        seen.append(line)
        if "phase AGENT" in line:
            break
    assert "phase AGENT" in seen[-1], "".join(seen)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert f"rollout {rollout_id} cancelled" in stderr
    with RolloutClient(server_target) as client:
        events = list(client.watch(rollout_id))
    assert events[-1].finished.status == pb.ROLLOUT_STATUS_CANCELLED


def _spec(agent_command: str) -> dict[str, object]:
    return {
        "task": {"instruction": "x"},
        "agent": {"name": "command", "command": agent_command},
    }


def test_serve_starts_the_server_and_stops_on_sigterm(tmp_path: Path) -> None:
    command = [
        sys.executable, "-c", "from rollout_client.cli import main; main()",
        "serve", "--listen", "127.0.0.1:0", "--state-dir", str(tmp_path / "state"),
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    try:
        target = ""
        for line in process.stdout:
            if "listening on" in line:
                target = line.split("listening on")[1].strip()
                break
        assert target, "the server never said where it listens"
        missing = rollout(target, "get", "no-such-rollout")
        assert missing.stderr.startswith("error: not found: ")
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output


def test_reward_key_picks_the_reward_among_reward_json_keys(server_target: str) -> None:
    write = """echo '{"score": 0.25, "speed": 3}' > ~/logs/verifier/reward.json"""
    args = ("run", "--instruction", "x", "--agent-command", "true", "--verify", write, "--json")
    unnamed = json.loads(rollout(server_target, *args).stdout)
    named = rollout(server_target, *args, "--reward-key", "score")

    assert "reward" not in unnamed["result"]  # two numeric keys and none named: unset
    assert named.exit_code == SUCCEEDED, named.output
    result = json.loads(named.stdout)["result"]
    assert (result["reward"], result["rewardKey"]) == (0.25, "score")


def test_list_stays_within_80_columns(server_target: str) -> None:
    run = uuid.uuid4().hex
    labels = {"run": run, "note": "a label value long enough to need folding"}
    with RolloutClient(server_target) as client:
        done = client.run({**_spec("true"), "labels": labels, "task_id": "task-with-a-long-id"})
        running = client.start({**_spec("sleep 60"), "labels": labels})

    table = runner.invoke(app, ["list", "--label", f"run={run}", "--target", server_target],
                          env={"COLUMNS": "80"})  # fmt: skip
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, table.stdout
    for rollout_id in (done.id, running.id):  # whole, to copy into `rollout get`
        assert any(line.startswith(rollout_id + " ") for line in lines), table.stdout
    assert sum(line.rstrip().endswith("folding") for line in lines) == 2, table.stdout
    with RolloutClient(server_target) as client:
        client.cancel(running.id, "done with it")


def test_start_detaches_and_watch_label_follows_every_matching_rollout(
    server_target: str,
) -> None:
    label = f"run={uuid.uuid4().hex}"
    ticking = "while true; do echo tick; sleep 0.2; done"  # events for as long as it runs
    started = rollout(
        server_target, "start", "--instruction", "x", "--agent-command", ticking, "--label", label
    )
    assert started.exit_code == 0, started.output
    rollout_id = started.stdout.strip()
    assert len(rollout_id) == 32, started.stdout

    command = cli_argv("watch", "--label", label, "--target", server_target)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    seen = []
    for line in process.stdout:  # live events only: the ticks tell the watch is on
        seen.append(line)
        if line.startswith(f"{rollout_id[:8]} ") and "agent | tick" in line:
            break
    assert seen[0].startswith(f"{rollout_id[:8]} rollout {rollout_id}"), "".join(seen)
    assert rollout(server_target, "cancel", rollout_id).exit_code == 0
    for line in process.stdout:
        seen.append(line)
        if "finished CANCELLED" in line:
            break
    assert seen[-1].startswith(f"{rollout_id[:8]} "), "".join(seen)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr


def test_watch_takes_an_id_or_a_label(server_target: str) -> None:
    assert rollout(server_target, "watch").exit_code == 2
    both = rollout(server_target, "watch", "some-id", "--label", "a=b")
    assert both.exit_code == 2
    assert "--label watches every rollout carrying it" in both.stderr
