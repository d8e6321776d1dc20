"""The live view of one rollout's events, for `rollout run` and `rollout watch`.

Finished things (phase changes, command results, turns, agent output lines) scroll by,
stamped with the time since the first event; below them a status line shows the phase,
the elapsed time and the number of turns so far. `follow_all` shows many rollouts' events
(`rollout watch --label`): the same lines, each after its rollout's short id.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime

from rich.console import Console
from rich.live import Live
from rich.text import Text
from rollout.v1 import rollout_pb2 as pb

from rollout_client.inert import inert
from rollout_client.render import command_lines, phase_name, seconds, status_text

__all__ = ["EventView", "follow", "follow_all"]

_SHORT_ID = 8

# Raw output arrives in chunks that split lines; the other kinds are whole messages.
_CHUNKED = {pb.AGENT_OUTPUT_KIND_STDOUT: "", pb.AGENT_OUTPUT_KIND_STDERR: "red"}
_OUTPUT_STYLES = {pb.AGENT_OUTPUT_KIND_ERROR: "red", pb.AGENT_OUTPUT_KIND_TRUNCATED: "dim"}


class EventView:
    """Turns one rollout's events into lines to print; renders itself as the status line."""

    def __init__(self) -> None:
        self.phase: pb.Phase = pb.PHASE_UNSPECIFIED
        self.turns = 0
        self.finished: pb.Rollout | None = None
        self._first_time: datetime | None = None
        self._elapsed_s = 0.0
        self._seen_at = time.monotonic()
        self._partial: dict[pb.AgentOutputKind, str] = {}

    def feed(self, event: pb.RolloutEvent) -> list[Text]:
        """The lines `event` adds to the log, each stamped with its elapsed time."""
        self._advance_clock(event)
        match event.WhichOneof("payload"):
            case "phase":
                lines = [*self._flush(), self._phase_line(event.phase)]
            case "command":
                lines = command_lines(event.command)
            case "turn":
                self.turns += 1
                lines = [_turn_line(event.turn)]
            case "output":
                lines = self._output_lines(event.output)
            case "finished":
                self.finished = event.finished
                status = status_text(event.finished.status)
                lines = [*self._flush(), Text.assemble(("finished ", "dim"), status)]
            case _:
                lines = []
        stamp = f"{self._elapsed_s:7.2f}s "  # a column: fixed decimals keep it aligned
        return [Text.assemble((stamp, "dim"), line) for line in lines]

    def __rich__(self) -> Text:
        elapsed_s = self._elapsed_s + (time.monotonic() - self._seen_at)
        phase = phase_name(self.phase) if self.phase else "waiting"
        return Text.assemble(
            (phase, "bold cyan"),
            f"  {elapsed_s:.1f}s  {self.turns} turn{'' if self.turns == 1 else 's'}",
        )

    def _advance_clock(self, event: pb.RolloutEvent) -> None:
        self._seen_at = time.monotonic()
        if not event.HasField("time"):
            return
        moment = event.time.ToDatetime()
        if self._first_time is None:
            self._first_time = moment
        self._elapsed_s = (moment - self._first_time).total_seconds()

    def _phase_line(self, change: pb.PhaseChanged) -> Text:
        self.phase = change.phase
        line = Text.assemble(("phase ", "dim"), (phase_name(change.phase), "bold cyan"))
        if change.message:
            line.append(f"  {inert(change.message)}", style="dim")
        return line

    def _output_lines(self, output: pb.AgentOutput) -> list[Text]:
        if output.kind not in _CHUNKED:
            label = f"{output.tool_name} " if output.tool_name else ""
            style = _OUTPUT_STYLES.get(output.kind, "")
            return [_agent_line(label + line, style) for line in output.text.splitlines()]
        *complete, rest = (self._partial.pop(output.kind, "") + output.text).split("\n")
        if rest:
            self._partial[output.kind] = rest
        return [_agent_line(line, _CHUNKED[output.kind]) for line in complete]

    def _flush(self) -> list[Text]:
        """Unfinished output lines, printed when the agent's turn to speak is over."""
        lines = [_agent_line(text, _CHUNKED[kind]) for kind, text in self._partial.items()]
        self._partial.clear()
        return lines


def _agent_line(text: str, style: str) -> Text:
    return Text.assemble(("agent | ", "dim"), (inert(text), style))


def _turn_line(turn: pb.Turn) -> Text:
    finish_reason = inert(turn.finish_reason) or "-"
    line = Text.assemble(("turn ", "dim"), str(turn.index), f" {finish_reason}")
    line.append(
        f"  {turn.usage.prompt_tokens}+{turn.usage.completion_tokens} tokens"
        f" in {seconds(turn.latency)}",
        style="dim",
    )
    if turn.upstream_error:
        error = inert(turn.upstream_error)
        line.append(f"  upstream {turn.upstream_status}: {error}", style="red")
    return line


def follow(events: Iterable[pb.RolloutEvent], console: Console) -> pb.Rollout | None:
    """Print `events` as they come, with a live status line; the finished rollout, if seen."""
    view = EventView()
    with Live(view, console=console, transient=True, refresh_per_second=4) as live:
        for event in events:
            for line in view.feed(event):
                live.console.print(line)
    return view.finished


def follow_all(events: Iterable[pb.RolloutEvent], console: Console) -> None:
    """Print the events of many rollouts as they come, each line after its rollout's short
    id; a rollout's first line names it in full (for `rollout get`)."""
    views: dict[str, EventView] = {}
    for event in events:
        short = Text(f"{event.rollout_id[:_SHORT_ID]} ", style="bold")
        if event.rollout_id not in views:
            views[event.rollout_id] = EventView()
            console.print(Text.assemble(short, ("rollout ", "dim"), event.rollout_id))
        view = views[event.rollout_id]
        for line in view.feed(event):
            console.print(Text.assemble(short, line))
        if view.finished is not None:
            del views[event.rollout_id]  # its last event: the watch may run for days
