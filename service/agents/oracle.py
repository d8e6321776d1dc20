"""The `oracle` harness: runs the task's reference solution, so a task can be checked end to end.

It runs SOLUTION_DIR/solve.sh (Harbor's contract) with bash, in the task's workdir, with
the task's environment and `Task.solution_env` over it (plus DEBIAN_FRONTEND=noninteractive,
as Harbor's oracle sets). The solution files are staged by the lifecycle after setup, for
this harness only (`ORACLE`): no other agent ever sees them.
"""

from __future__ import annotations

from service.agents.base import ORACLE, AgentContext
from service.agents.command import CommandAgent
from service.sandboxes import SOLUTION_DIR

__all__ = ["OracleAgent"]

SOLVE = f"{SOLUTION_DIR}/solve.sh"
_COMMAND = f'test -f {SOLVE} || {{ echo "no {SOLVE}: the task has no solution" >&2; exit 127; }}'


class OracleAgent(CommandAgent):
    """Runs /solution/solve.sh as the command agent runs its command; needs no model."""

    name = ORACLE

    def command_and_env(self, context: AgentContext) -> tuple[str, dict[str, str]]:
        env = {"DEBIAN_FRONTEND": "noninteractive", **context.solution_env}
        return f"{_COMMAND}\nexec bash {SOLVE}", env
