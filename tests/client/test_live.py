"""The live view turns events into log lines and a status line."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

from rich.console import Console
from rollout.v1 import rollout_pb2 as pb
from rollout_client.live import EventView, follow
from rollout_client.render import command_line, rollout_summary

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _event(seq: int, at_s: float, **payload: object) -> pb.RolloutEvent:
    event = pb.RolloutEvent(rollout_id="r-1", seq=seq, **payload)  # type: ignore[arg-type]
    event.time.FromDatetime(T0 + timedelta(seconds=at_s))
    return event


def _output(kind: pb.AgentOutputKind, text: str, tool: str = "") -> pb.AgentOutput:
    return pb.AgentOutput(kind=kind, text=text, tool_name=tool)


def _plain(view: EventView, event: pb.RolloutEvent) -> list[str]:
    return [line.plain for line in view.feed(event)]


def test_events_become_stamped_lines() -> None:
    view = EventView()
    phase = pb.PhaseChanged(phase=pb.PHASE_SETUP, message="setup 1/1")
    assert _plain(view, _event(1, 0.0, phase=phase)) == ["   0.00s phase SETUP  setup 1/1"]
    command = pb.CommandResult(
        stage=pb.COMMAND_STAGE_VERIFY, index=1, command="test -f b", exit_code=1, stderr="x\nno b\n"
    )
    line, *tail = _plain(view, _event(2, 1.25, command=command))
    assert line.startswith("   1.25s verify[1] FAIL test -f b  exit 1 in 0s")
    assert line.endswith("no b"), "a failed command shows the last line of its stderr"
    assert tail == ["   1.25s   err | x", "   1.25s   err | no b"]
    assert view.phase == pb.PHASE_SETUP


def test_a_verify_command_shows_the_tail_of_what_the_tests_printed() -> None:
    # A Harbor task's test.sh exits 0 with reward 0 and says why on its stdout.
    printed = "".join(f"line {n}\n" for n in range(1, 9)) + "FAILED test_output - wrong\n"
    command = pb.CommandResult(
        stage=pb.COMMAND_STAGE_VERIFY, index=0, command="bash /tests/test.sh", stdout=printed
    )
    rollout = pb.Rollout(id="r-1", result=pb.RolloutResult(verify_results=[command]))
    shown = [line.plain for line in rollout_summary(rollout)]
    at = shown.index("verify[0] ok   bash /tests/test.sh  exit 0 in 0s")
    assert shown[at + 1 : at + 7] == [
        "  out | line 5",
        "  out | line 6",
        "  out | line 7",
        "  out | line 8",
        "  out | FAILED test_output - wrong",
        "phase UNSPECIFIED  agent exit none  turns 0",
    ]
    setup = pb.CommandResult(stage=pb.COMMAND_STAGE_SETUP, command="echo hi", stdout="hi\n")
    assert [line.plain for line in EventView().feed(_event(1, 0, command=setup))] == [
        "   0.00s setup[0] ok   echo hi  exit 0 in 0s"
    ], "setup output stays out of the way"


def test_a_wrapped_command_shows_as_the_task_wrote_it() -> None:
    command = pb.CommandResult(
        stage=pb.COMMAND_STAGE_VERIFY,
        command="rm -rf /logs && mkdir -p /logs && bash /tests/test.sh",
        display_command="bash /tests/test.sh",
    )
    assert command_line(command).plain == "verify[0] ok   bash /tests/test.sh  exit 0 in 0s"


def test_output_chunks_are_joined_into_lines_and_flushed_at_the_end() -> None:
    view = EventView()
    stdout = pb.AGENT_OUTPUT_KIND_STDOUT
    assert _plain(view, _event(1, 0, output=_output(stdout, "hel"))) == []
    assert _plain(view, _event(2, 0, output=_output(stdout, "lo\nwor"))) == [
        "   0.00s agent | hello"
    ]
    tool = _output(pb.AGENT_OUTPUT_KIND_TOOL_CALL, "ls -la", tool="bash")
    assert _plain(view, _event(3, 0, output=tool)) == ["   0.00s agent | bash ls -la"]
    finished = pb.Rollout(id="r-1", status=pb.ROLLOUT_STATUS_SUCCEEDED)
    assert _plain(view, _event(4, 2, finished=finished)) == [
        "   2.00s agent | wor",
        "   2.00s finished SUCCEEDED",
    ]
    assert view.finished == finished


def test_turns_are_counted_in_the_status_line() -> None:
    view = EventView()
    view.feed(_event(1, 0, phase=pb.PhaseChanged(phase=pb.PHASE_AGENT)))
    for index in range(3):
        turn = pb.Turn(index=index, finish_reason="tool_calls", usage=pb.Usage(prompt_tokens=9))
        [line] = _plain(view, _event(2 + index, 1, turn=turn))
        assert f"turn {index} tool_calls  9+0 tokens" in line
    status = view.__rich__().plain
    assert status.startswith("AGENT  ")
    assert status.endswith("3 turns")


def test_follow_prints_every_line_and_returns_the_finished_rollout() -> None:
    out = io.StringIO()
    finished = pb.Rollout(id="r-1", status=pb.ROLLOUT_STATUS_FAILED)
    events = [
        _event(1, 0, phase=pb.PhaseChanged(phase=pb.PHASE_QUEUED)),
        _event(2, 0.5, output=_output(pb.AGENT_OUTPUT_KIND_STDERR, "[bold]not markup[/]\n")),
        _event(3, 1, finished=finished),
    ]
    assert follow(events, Console(file=out, soft_wrap=True)) == finished
    assert out.getvalue().splitlines() == [
        "   0.00s phase QUEUED",
        "   0.50s agent | [bold]not markup[/]",
        "   1.00s finished FAILED",
    ]


def test_the_summary_shows_reward_error_and_commands() -> None:
    rollout = pb.Rollout(
        id="r-9",
        status=pb.ROLLOUT_STATUS_FAILED,
        phase=pb.PHASE_DONE,
        result=pb.RolloutResult(
            reward=0.5,
            metrics={"passed": 1.0},
            error=pb.Error(kind=pb.ERROR_KIND_SETUP, message="setup command 0 exited 2"),
            setup_results=[
                pb.CommandResult(stage=pb.COMMAND_STAGE_SETUP, command="make", exit_code=2)
            ],
            files={"b.txt": b"hi"},
            agent_log_tail="one\ntwo\n",
        ),
    )
    lines = [line.plain for line in rollout_summary(rollout)]
    assert lines[0] == "rollout r-9  FAILED  reward 0.5"
    assert "error SETUP: setup command 0 exited 2" in lines
    assert "metrics passed=1" in lines
    assert command_line(rollout.result.setup_results[0]).plain in lines
    assert "files b.txt" in lines
    assert lines[-2:] == ["  one", "  two"]
    unset = rollout_summary(pb.Rollout(id="r-0", status=pb.ROLLOUT_STATUS_SUCCEEDED))
    assert unset[0].plain.endswith("reward none"), "no reward differs from a reward of 0"
