"""mini-swe-agent, headless, on one task: run *inside the sandbox* by the mini-swe-agent harness
with the sandbox's own Python and the cached install on PYTHONPATH (never imported by the
service, which does not have mini-swe-agent).

    python3.11 -s mini_swe_agent_runner.py CONFIG_JSON LOADED < INSTRUCTION_FILE

The config is merged over mini-swe-agent's own `mini.yaml` (its prompts and tool), the
instruction is read verbatim from stdin (UTF-8) once the model, the environment and the agent
are made, and the agent is mini-swe-agent's
`DefaultAgent` (no confirmation, no prompt on stdin). Each message it adds is printed as
one JSON line, `{"role", "content", "actions", "exit_status"}`, as soon as it is added.
Exits 0 when the agent submitted, 1 otherwise.

Before it reads the instruction it writes LOADED: the directories its modules came from that
the task could change (`sys.path` but PYTHONPATH's, the service's read-only install, and
its own), one a
line. Started ahead (`warm_start`), that is the sign it has done all it does before its input,
and what the hand-over checks nothing was changed in since.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def _line(message: dict[str, Any]) -> str:
    extra = message.get("extra") or {}
    actions = [a.get("command", "") for a in extra.get("actions", []) if isinstance(a, dict)]
    event = {
        "role": message.get("role", ""),
        "content": message.get("content") or "",
        "actions": actions,
        "exit_status": extra.get("exit_status", ""),
    }
    return json.dumps(event, ensure_ascii=False)


def _loaded(path: str) -> None:
    installed = set(os.environ.get("PYTHONPATH", "").split(os.pathsep))
    installed.add(os.path.dirname(os.path.abspath(__file__)))  # the harness's own files
    dirs = [d for d in sys.path if d and d not in installed and os.path.exists(d)]
    Path(path).write_text("".join(f"{d}\n" for d in dirs))


def main(config_file: str, loaded_file: str) -> int:
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import builtin_config_dir, get_config_from_spec
    from minisweagent.environments import get_environment
    from minisweagent.models import get_model
    from minisweagent.utils.serialize import recursive_merge

    class PrintingAgent(DefaultAgent):  # type: ignore[misc]
        def add_messages(self, *messages: dict[str, Any]) -> list[dict[str, Any]]:
            for message in messages:
                print(_line(message), flush=True)
            added: list[dict[str, Any]] = super().add_messages(*messages)
            return added

    ours = json.loads(Path(config_file).read_text())
    config = recursive_merge(get_config_from_spec(str(builtin_config_dir / "mini.yaml")), ours)
    model = get_model(config=config["model"])
    environment = get_environment(config["environment"], default_type="local")
    agent = PrintingAgent(model, environment, **config["agent"])
    _loaded(loaded_file)
    outcome = agent.run(sys.stdin.buffer.read().decode())
    return 0 if outcome.get("exit_status") == "Submitted" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
