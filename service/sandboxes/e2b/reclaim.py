"""`Sandbox.reclaim` on E2B: one root script in the VM, since the VM is the sandbox.

The agent may have had root there (sudo), so no uid, session or environment marks its
processes. The script kills every process of the VM but init (pid 1), the kernel's
threads and its own ancestors (envd, which runs it), round after round until a scan finds
none, so what forks meanwhile dies too; then it clears the paths as the local backend
does (`hostfs_clear`): a non-directory on the way is unlinked, whatever is at the end is
removed (`rm -rf`, which never follows a link), and the directories to make are made
again, owned like HOME. A service a task's tests need is started by a verify command.

Paths travel inside the script, quoted; a long list is cut into several runs (a command
line is one argument, of 128 KiB at most); every run kills again, finding nothing.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from service.sandboxes.base import HOME

__all__ = ["RESISTED", "STUCK", "ReclaimRun", "reclaim_runs"]

RESISTED = 3
"""The script's exit code when processes kept appearing (the agent resisting)."""
STUCK = 4
"""Its exit code when a path could not be cleared (e.g. `chattr +i` under sudo)."""
_SCRIPT_BYTES = 64 * 1024
_SCRIPT = r"""
set -u
keep=" "
p=$$
while [ "$p" != 0 ] && [ -r /proc/$p/stat ]; do
  keep="$keep$p "
  read -r stat < /proc/$p/stat; set -- ${stat##*) }; p=$2
done
killed=" "
for round in $(seq 60); do
  victims=""
  for d in /proc/[0-9]*; do
    q=${d#/proc/}
    [ "$q" = 1 ] && continue
    case "$keep" in *" $q "*) continue;; esac
    read -r stat < "$d/stat" 2>/dev/null || continue
    set -- ${stat##*) }
    case "$1" in Z|X) [ "${18}" = 1 ] && continue;; esac  # a zombie leader with threads lives
    [ $(( $7 & 0x200000 )) -ne 0 ] && continue  # PF_KTHREAD: the kernel's
    victims="$victims $q"
  done
  [ -z "$victims" ] && break
  kill -KILL $victims 2>/dev/null
  for q in $victims; do case "$killed" in *" $q "*) ;; *) killed="$killed$q ";; esac; done
  sleep 0.02
done
set -- $killed
echo "killed $#"
[ -n "$victims" ] && exit RESISTED
owner=$(stat -c %u:%g HOME_DIR)
step() {  # moves the first component of the caller's $rest onto its $p
  local part=${rest%%/*}
  if [ "$part" = "$rest" ]; then rest=""; else rest=${rest#*/}; fi
  p="$p/$part"
}
clear_path() {
  local p="" rest="${1#/}"
  while [ -n "$rest" ]; do
    step
    if [ -z "$rest" ]; then
      if [ -e "$p" ] || [ -L "$p" ]; then rm -rf -- "$p" || exit STUCK; return 0; fi
      return 1
    fi
    if [ -L "$p" ] || { [ -e "$p" ] && [ ! -d "$p" ]; }; then
      rm -f -- "$p" || exit STUCK
      return 0
    fi
    [ -d "$p" ] || return 1
  done
  return 1
}
make_dir() {
  local p="" rest="${1#/}"
  while [ -n "$rest" ]; do
    step
    [ -d "$p" ] || { mkdir -- "$p" && chown "$owner" -- "$p"; } || exit STUCK
  done
}
i=0
for path in "${clear[@]}"; do clear_path "$path" && echo "removed $i"; i=$((i + 1)); done
for path in "${make[@]}"; do make_dir "$path"; done
"""
_SCRIPT = (
    _SCRIPT.replace("HOME_DIR", HOME)
    .replace("RESISTED", str(RESISTED))
    .replace("STUCK", str(STUCK))
)


@dataclass(frozen=True)
class ReclaimRun:
    """One run of the script: the command, and the paths its `removed N` lines index."""

    command: str
    paths: list[str]

    def tally(self, output: str) -> tuple[int, list[str]]:
        """(processes killed, paths at which something was removed) from its stdout."""
        killed, removed = 0, []
        for line in output.splitlines():
            word, _, value = line.partition(" ")
            if word == "killed":
                killed += int(value)
            elif word == "removed":
                removed.append(self.paths[int(value)])
        return killed, removed


def reclaim_runs(remove: Sequence[str], empty_dirs: Sequence[str]) -> list[ReclaimRun]:
    """The runs that reclaim a VM: one at least, which kills; more for a long path list."""
    runs: list[ReclaimRun] = []
    chunk: list[str] = []
    size = 0
    for path in [*remove, *empty_dirs]:
        if chunk and size + len(path) > _SCRIPT_BYTES:
            runs.append(_run(chunk, empty_dirs))
            chunk, size = [], 0
        chunk.append(path)
        size += len(path) + 3
    return [*runs, _run(chunk, empty_dirs)]


def _run(paths: list[str], empty_dirs: Sequence[str]) -> ReclaimRun:
    made = [path for path in paths if path in empty_dirs]
    arrays = f"clear=({_words(paths)})\nmake=({_words(made)})\n"
    return ReclaimRun("bash -c " + shlex.quote(arrays + _SCRIPT), paths)


def _words(paths: list[str]) -> str:
    return " ".join(map(shlex.quote, paths))
