"""`rollout run --local` and `rollout batch --local`: one command, a server of its own.

Each command here runs with TMPDIR in the test's directory, so the embedded server's state
directory, and every process that names it (the server, its sandboxes), can be looked for
after the command has ended: none may be left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from tests.client.conftest import cli_argv

_TIMEOUT_S = 300


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp_path), "ROLLOUT_TARGET": "127.0.0.1:1"}


def _processes_naming(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # it ended while we looked
            continue
        if text in argv:
            found.append(argv)
    return found


def _left_over(tmp_path: Path) -> list[str]:
    """What the embedded server left: its state directory, or a process naming it."""
    return [str(p) for p in tmp_path.glob("rollout-local-*")] + _processes_naming(
        str(tmp_path / "rollout-local-")
    )


def test_run_local_starts_a_server_and_stops_it(tmp_path: Path) -> None:
    done = subprocess.run(
        cli_argv(
            "run", "--local", "--instruction", "copy", "--setup", "echo hi > a.txt",
            "--agent-command", "cp a.txt b.txt", "--verify", "grep -q hi b.txt",
        ),
        env=_env(tmp_path), capture_output=True, text=True, timeout=_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCEEDED  reward 1" in done.stdout
    assert _left_over(tmp_path) == []


def test_ctrl_c_at_the_terminal_cancels_and_stops_the_local_server(tmp_path: Path) -> None:
    process = subprocess.Popen(
        cli_argv("run", "--local", "--instruction", "x", "--agent-command", "sleep 613"),
        env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # a process group of its own, as a terminal's job
    )  # fmt: skip
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        if "phase AGENT" in line:
            break
    assert "phase AGENT" in seen[-1], "".join(seen)
    assert _processes_naming("sleep 613") != []
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group gets it
    _, stderr = process.communicate(timeout=_TIMEOUT_S)
    assert process.returncode == 130, stderr
    assert "cancelled" in stderr
    assert _left_over(tmp_path) == []
    assert _processes_naming("sleep 613") == []


def test_batch_local_runs_a_dataset_on_its_own_server(tmp_path: Path) -> None:
    specs = tmp_path / "specs.jsonl"
    spec = {"task": {"instruction": "x", "verify": ["test -f done"]}, "agent": {"name": "command"}}
    spec["agent"]["command"] = "touch done"  # type: ignore[index]
    specs.write_text(json.dumps({**spec, "task_id": "one"}) + "\n")
    output = tmp_path / "out"
    done = subprocess.run(
        cli_argv("batch", "--local", str(specs), "--output", str(output)),
        env=_env(tmp_path), capture_output=True, text=True, timeout=_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    [result] = [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]
    assert (result["task"], result["status"], result["reward"]) == ("one", "SUCCEEDED", 1.0)
    assert _left_over(tmp_path) == []
