"""opencode started ahead (`agents.warm_start`): what it reads before its prompt, and when it
has read it.

opencode 1.18 reads, before its prompt, whether its workdir or any directory above it has a
`.git`, `opencode.json`, `opencode.jsonc` or `.opencode` (and `~/.opencode`), and keeps what
it found (the project and its config: a `git init` in setup after that would be missed). So
it is started ahead only where none of them is, it has settled once it logged `init` (it has
read them), and the hand-over checks again that none is there. A killed opencode leaves its
state, /tmp/opencode and the library bun unpacked in /tmp: `cleanup` removes them.
"""

from __future__ import annotations

import shlex

from service.agents.opencode_config import INSTRUCTION_FILE, XDG_ROOT
from service.agents.warm_start import WarmStart

__all__ = ["CLEANUP", "OPENCODE_WARM"]

_LOG = f"{XDG_ROOT}/data/opencode/log/opencode.log"
_BUN_LIBRARIES = "/tmp/.[0-9a-f]*-00000000.so"
"""Where bun unpacks a library at each start (a killed process leaves it)."""
CLEANUP = f"rm -rf -- {XDG_ROOT} /tmp/opencode {_BUN_LIBRARIES}"
"""Removes what opencode started ahead (and its plan's files) wrote."""
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

OPENCODE_WARM = WarmStart(
    instruction_file=INSTRUCTION_FILE,
    go_file=f"{XDG_ROOT}/.warm-go",
    settle_test=f"grep -qs message=init {shlex.quote(_LOG)}",
    cleanup=CLEANUP,
    unchanged=_NO_PROJECT,
)
