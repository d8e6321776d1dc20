"""The warm-start seam every packaged harness may implement: what it starts ahead and how the
rollout's instruction is handed to it (`WarmStart`). `HarnessAgent` does the rest, the same
for every harness; a backend that can start agents ahead (`sandboxes.prestart`: the local
one, with `ROLLOUT_LOCAL_WARM_AGENTS`) drives it.

What is started ahead is what the cold path runs, exactly: the same files (its launcher
included), the same command in the same workdir, the same environment, as the same user in
the same kind of sandbox; the plan is compared whole with the rollout's before it is used.
The launcher reads the instruction from `instruction_file` on stdin; started ahead, that
path is a FIFO held open by a holder (`holder_script`), so the launcher's `< file` opens it
and the agent gets through its start, then blocks reading it. The holder says `settled`
once the harness's `settle_test` holds (the agent has read all it reads before its input),
and removes the FIFO; prepare() then writes the instruction file as the cold path does, and
at the agent phase the holder copies it into the agent's stdin and exits.

What the agent read at its start that the task's setup could change after (a project's
config in the workdir, a `.env`, a module on its path) is the harness's `unchanged`
check, run in the workdir before the holder starts the agent and again at the hand-over
(with the same directory as the holder's); if it fails, or the plan differs, the process is
killed, what it wrote is removed (`cleanup`), and the rollout runs cold.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from service.sandboxes import SETTLE_TIMEOUT_S, PrestartedAgent, Sandbox, in_workdir

__all__ = ["WarmStart", "discard", "hand_over", "holder_script", "settled"]

_SETTLE_POLL_S = 0.05
_COMMAND_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class WarmStart:
    """How one harness is started ahead (all paths are the sandbox's, under its home)."""

    instruction_file: str
    """What its launcher reads on stdin: the rollout's own, never part of the plan."""
    go_file: str
    """A FIFO the holder waits on for the hand-over."""
    settle_test: str
    """A shell condition, true once the agent has read what it reads before its input."""
    cleanup: str
    """Removes what the agent started ahead (and its plan's files) wrote."""
    unchanged: str = ""
    """Shell run in the workdir: exits non-zero if what the agent reads at its start is not
    as the cold path would find it (before the start, and at the hand-over)."""
    handed_unchanged: str = ""
    """More of the same, run at the hand-over only (e.g. nothing newer than its start)."""
    settle_rounds: int = int(SETTLE_TIMEOUT_S / _SETTLE_POLL_S)
    """The holder stops looking after as long as the server waits, so an agent that died or
    never settles does not leave a loop spawning in the pooled sandbox."""


def holder_script(warm: WarmStart) -> str:
    """Run in the workdir: makes and holds the agent's stdin, says when it has settled,
    and feeds it the instruction file at the hand-over."""
    instruction, go = shlex.quote(warm.instruction_file), shlex.quote(warm.go_file)
    return (
        f"{warm.unchanged}\nrm -f -- {instruction} {go}\n"
        f"mkfifo -m 600 -- {instruction} {go} || exit 1\n"
        f"exec 3<>{instruction}\n"
        'echo "ready $$"\n'
        f"n=0; until {warm.settle_test}; do\n"
        f"  n=$((n + 1)); [ $n -le {warm.settle_rounds} ] || exit 4; sleep {_SETTLE_POLL_S}\n"
        "done\n"
        f"rm -f -- {instruction}\n"
        "echo settled\n"
        f"read -r _ < {go}\n"
        f"rm -f -- {go}\n"
        f"exec cat -- {instruction} >&3\n"
    )


async def settled(agent: PrestartedAgent) -> bool:
    """Whether `agent` has read what it reads before its input and still waits for it."""
    return await agent.until_settled(SETTLE_TIMEOUT_S)


async def hand_over(
    sandbox: Sandbox, warm: WarmStart, agent: PrestartedAgent, workdir: str
) -> bool:
    """Give `agent` its instruction, if what it read at its start is still as it found it."""
    if not agent.usable:
        return False
    same_dir = f"[ /proc/{agent.holder_pid}/cwd -ef . ] || exit 4\n"
    check = (
        f"{warm.unchanged}\n{warm.handed_unchanged}\n{same_dir}echo > {shlex.quote(warm.go_file)}\n"
    )
    result = await sandbox.exec(in_workdir(workdir, check), timeout_s=_COMMAND_TIMEOUT_S)
    return result.exit_code == 0


async def discard(sandbox: Sandbox, warm: WarmStart, agent: PrestartedAgent) -> None:
    """Kill `agent` and remove what it wrote, so the cold path starts as if it never was."""
    await agent.kill()
    await sandbox.exec(warm.cleanup, timeout_s=_COMMAND_TIMEOUT_S)
