"""How the CLI shows rollouts to a person (rich text) and to a program (proto JSON).

Every text of a rollout shown to a person passes through `inert` first: the agent may have
written it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from google.protobuf import json_format
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from rich import box
from rich.table import Table
from rich.text import Text
from rollout.v1 import rollout_pb2 as pb

from rollout_client.inert import inert
from rollout_client.results import reward_of, status_name

__all__ = [
    "command_line",
    "command_lines",
    "figure",
    "message_json",
    "phase_name",
    "rollout_summary",
    "rollouts_table",
    "seconds",
    "status_name",
    "status_text",
]

_STATUS_STYLES = {
    pb.ROLLOUT_STATUS_SUCCEEDED: "bold green",
    pb.ROLLOUT_STATUS_FAILED: "bold red",
    pb.ROLLOUT_STATUS_TIMED_OUT: "bold yellow",
    pb.ROLLOUT_STATUS_CANCELLED: "yellow",
}
_AGENT_LOG_TAIL_LINES = 10
_VERIFY_TAIL_LINES = 5


def message_json(message: Message, *, compact: bool = False) -> str:
    """`message` as proto3's canonical JSON (one line when `compact`): lowerCamelCase names,
    as the dashboard's Connect JSON and grpcurl write them, and every field, zero values too
    (turn 0's `index`, a reward of 0), so a jq filter never reads a missing field as null."""
    data = json_format.MessageToDict(message, always_print_fields_with_no_presence=True)
    return json.dumps(data, separators=(",", ":")) if compact else json.dumps(data, indent=2)


def figure(value: float) -> str:
    """A number as a person reads it: at most three decimals, trailing zeros dropped (1, 0.5,
    5.495 rather than 5.494999999999999); below 0.001, three significant digits, so a small
    reward never reads as 0."""
    if value != 0 and abs(value) < 0.001:
        return f"{value:.3g}"
    return f"{value:.3f}".rstrip("0").rstrip(".")


def seconds(duration: Duration | float) -> str:
    """A duration (or a number of seconds) as a figure with its unit: "1.25s"."""
    if isinstance(duration, Duration):
        return seconds(duration.ToTimedelta().total_seconds())
    return f"{figure(duration)}s"


def phase_name(phase: pb.Phase) -> str:
    return pb.Phase.Name(phase).removeprefix("PHASE_")


def status_text(status: pb.RolloutStatus) -> Text:
    return Text(status_name(status), style=_STATUS_STYLES.get(status, "cyan"))


def _reward(rollout: pb.Rollout) -> str:
    reward = reward_of(rollout)
    return "none" if reward is None else figure(reward)


def command_line(command: pb.CommandResult) -> Text:
    """One line for a finished setup or verify command, with stderr's last line on failure."""
    stage = pb.CommandStage.Name(command.stage).removeprefix("COMMAND_STAGE_").lower()
    ok = command.exit_code == 0
    line = Text.assemble(
        (f"{stage}[{command.index}] ", "dim"),
        ("ok  " if ok else "FAIL", "green" if ok else "red"),
        f" {inert(command.display_command or command.command)}",
        (f"  exit {command.exit_code} in {seconds(command.duration)}", "dim"),
    )
    if command.timed_out:
        line.append(" (timed out)", style="yellow")
    last_stderr = command.stderr.strip().splitlines()[-1:] if not ok else []
    if last_stderr:
        line.append(f"  {inert(last_stderr[0])}", style="red dim")
    return line


def command_lines(command: pb.CommandResult) -> list[Text]:
    """`command_line`, and for a verify command the last lines the tests printed (why a
    reward is 0: a Harbor task's test.sh says so on its stdout, whatever its exit code)."""
    lines = [command_line(command)]
    if command.stage == pb.COMMAND_STAGE_VERIFY:
        for stream, text in (("out", command.stdout), ("err", command.stderr)):
            tail = text.rstrip().splitlines()[-_VERIFY_TAIL_LINES:]
            lines.extend(Text(f"  {stream} | {inert(printed)}", style="dim") for printed in tail)
    return lines


def rollout_summary(rollout: pb.Rollout) -> list[Text]:
    """What a person wants to see of a rollout: status, reward, error, commands, files."""
    result = rollout.result
    lines = [
        Text.assemble(
            ("rollout ", "bold"),
            (rollout.id, "bold"),
            "  ",
            status_text(rollout.status),
            f"  reward {_reward(rollout)}",
        )
    ]
    if result.HasField("error"):
        kind = pb.ErrorKind.Name(result.error.kind).removeprefix("ERROR_KIND_")
        lines.append(Text(f"error {kind}: {inert(result.error.message)}", style="red"))
    if result.metrics:
        metrics = ", ".join(f"{k}={figure(v)}" for k, v in sorted(result.metrics.items()))
        lines.append(Text(f"metrics {inert(metrics)}"))
    lines.extend(command_line(c) for c in result.setup_results)
    lines.extend(line for c in result.verify_results for line in command_lines(c))
    lines.append(Text(_agent_facts(rollout), style="dim"))
    if result.files:
        lines.append(Text("files " + inert(", ".join(sorted(result.files))), style="dim"))
    tail = result.agent_log_tail.rstrip().splitlines()[-_AGENT_LOG_TAIL_LINES:]
    if tail:
        lines.append(Text("agent output (last lines):", style="dim"))
        lines.extend(Text(f"  {inert(line)}") for line in tail)
    return lines


def _agent_facts(rollout: pb.Rollout) -> str:
    result = rollout.result
    exit_code = str(result.agent_exit_code) if result.HasField("agent_exit_code") else "none"
    facts = [f"phase {phase_name(rollout.phase)}", f"agent exit {exit_code}"]
    facts.append(f"turns {result.turn_count}")
    if result.timings.HasField("total"):
        facts.append(f"total {seconds(result.timings.total)}")
    if rollout.spec.labels:
        facts.append(f"labels {_labels(rollout)}")
    return "  ".join(facts)


def _labels(rollout: pb.Rollout, separator: str = ",") -> str:
    return inert(separator.join(f"{k}={v}" for k, v in sorted(rollout.spec.labels.items())))


def rollouts_table(rollouts: Iterable[pb.Rollout]) -> Table:
    """One row per rollout, within 80 columns: ids are never wrapped; a running rollout's
    phase and each label go on a line of their own."""
    # No padding: the box's column separator is the one space between columns, so the id,
    # status (a phase by its first word, at most 10 wide), reward and date leave task and
    # labels 17 columns of 80.
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=0)
    for name in ("id", "status", "reward", "created"):
        table.add_column(name, no_wrap=True)
    table.add_column("task", overflow="fold", min_width=4)
    table.add_column("labels", overflow="fold", min_width=6)
    for rollout in rollouts:
        status = status_text(rollout.status)
        if rollout.status == pb.ROLLOUT_STATUS_RUNNING:  # CREATING_SANDBOX as CREATING: no
            status.append(f"\n{phase_name(rollout.phase).split('_')[0]}")  # wider than SUCCEEDED
        table.add_row(
            rollout.id,
            status,
            _reward(rollout),
            rollout.create_time.ToDatetime().strftime("%m-%d %H:%M"),
            Text(inert(rollout.spec.task_id)),
            Text(_labels(rollout, "\n")),
        )
    return table
