"""opencode started ahead in a warm local sandbox (`sandboxes.local.warm_agent`), handed its
rollout's instruction on stdin as the agent phase begins.

What is started ahead is what the cold path runs, exactly: the same files (run.sh included),
the same command in the same workdir, the same environment, as the same user in the same kind
of sandbox; the plan is compared whole with the rollout's before it is used. opencode's stdin
is a FIFO at the instruction's path, held open by a holder (`holder_script`), so `run.sh`'s
`< instruction.md` opens it and opencode gets through its start, then blocks reading it. Once
the rollout is known, the FIFO is gone and prepare() writes the instruction file as the cold
path does; at the agent phase the holder copies that file into opencode's stdin and exits.

opencode 1.18 reads, before its prompt, whether its workdir or any directory above it has a
`.git`, `opencode.json`, `opencode.jsonc` or `.opencode` (and `~/.opencode`), and keeps what
it found (the project and its config: a `git init` in setup after that would be missed). So
the holder starts it only where none of them is, and says `settled` once opencode has read
them (`init` in its log); prepare() waits for that before the rollout's setup can run, and
the hand-over checks again that none is there and that the workdir is the same directory.
Otherwise the process is killed, what it wrote (opencode's state, /tmp/opencode, the library
bun unpacked in /tmp) is removed, and the rollout runs cold.
"""

from __future__ import annotations

import asyncio
import shlex
from typing import Any

from service.agents.opencode_config import INSTRUCTION_FILE, XDG_ROOT
from service.sandboxes.base import Sandbox, in_workdir
from service.sandboxes.local.warm_agent import PrestartedAgent

__all__ = ["CLEANUP", "discard", "hand_over", "holder_script", "settled"]

_INPUT_GO = f"{XDG_ROOT}/.warm-go"
"""The holder waits on this FIFO for the hand-over."""
_LOG = f"{XDG_ROOT}/data/opencode/log/opencode.log"
_BUN_LIBRARIES = "/tmp/.[0-9a-f]*-00000000.so"
"""Where bun unpacks a library at each start (a killed process leaves it)."""
CLEANUP = f"rm -rf -- {XDG_ROOT} /tmp/opencode {_BUN_LIBRARIES}"
"""Removes what opencode started ahead (and its plan's files) wrote."""
_SETTLE_TIMEOUT_S = 60.0
_SETTLE_POLL_S = 0.05
_SETTLE_ROUNDS = int(_SETTLE_TIMEOUT_S / _SETTLE_POLL_S)
"""The holder stops looking for opencode's start after as long as the server waits for it, so
an opencode that died or never logs it does not leave a loop spawning in the pooled sandbox."""
_COMMAND_TIMEOUT_S = 30.0
_NO_PROJECT = """d=$PWD
while :; do
  for m in .git opencode.json opencode.jsonc .opencode; do
    if [ -e "$d/$m" ] || [ -L "$d/$m" ]; then exit 3; fi
  done
  [ -n "$d" ] || break
  d=${d%/*}
done
if [ -e "$HOME/.opencode" ] || [ -L "$HOME/.opencode" ]; then exit 3; fi
"""
"""Exits 3 if what opencode reads of its workdir before its prompt is there (see above)."""


def holder_script() -> str:
    """Run in the workdir: makes and holds opencode's stdin, says when it has settled,
    and feeds it the instruction file at the hand-over."""
    instruction, go, log = (shlex.quote(p) for p in (INSTRUCTION_FILE, _INPUT_GO, _LOG))
    return (
        f"{_NO_PROJECT}rm -f -- {instruction} {go}\n"
        f"mkfifo -m 600 -- {instruction} {go} || exit 1\n"
        f"exec 3<>{instruction}\n"
        'echo "ready $$"\n'
        f"n=0; until grep -qs message=init {log}; do\n"
        f"  n=$((n + 1)); [ $n -le {_SETTLE_ROUNDS} ] || exit 4; sleep {_SETTLE_POLL_S}\n"
        "done\n"
        f"rm -f -- {instruction}\n"
        "echo settled\n"
        f"read -r _ < {go}\n"
        f"rm -f -- {go}\n"
        f"exec cat -- {instruction} >&3\n"
    )


async def settled(agent: PrestartedAgent) -> bool:
    """Whether `agent` has read what it reads before its prompt and still waits for it."""
    if not agent.usable or agent.process is None or agent.holder is None:
        return False
    ended: list[asyncio.Future[Any]] = [
        asyncio.ensure_future(p.wait()) for p in (agent.process, agent.holder)
    ]
    try:
        await asyncio.wait(
            {agent.settled, *ended}, timeout=_SETTLE_TIMEOUT_S, return_when="FIRST_COMPLETED"
        )
    finally:
        for waiter in ended:
            waiter.cancel()
    return agent.settled.done() and agent.usable


async def hand_over(sandbox: Sandbox, agent: PrestartedAgent, workdir: str) -> bool:
    """Give `agent` its instruction, if its workdir still is as it found it."""
    if not agent.usable:
        return False
    same_dir = f"[ /proc/{agent.holder_pid}/cwd -ef . ] || exit 4\n"
    check = f"{_NO_PROJECT}{same_dir}echo > {shlex.quote(_INPUT_GO)}\n"
    result = await sandbox.exec(in_workdir(workdir, check), timeout_s=_COMMAND_TIMEOUT_S)
    return result.exit_code == 0


async def discard(sandbox: Sandbox, agent: PrestartedAgent) -> None:
    """Kill `agent` and remove what it wrote, so the cold path starts as if it never was."""
    await agent.kill()
    await sandbox.exec(CLEANUP, timeout_s=_COMMAND_TIMEOUT_S)
