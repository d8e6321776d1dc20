"""Running a harness's process: the one launch path every agent shares.

Every harness, those here and any added later, starts its process through
`run_in_task`, so each runs as Harbor runs agents, without a line of its own for it:

| what             | how                                                             |
| ---------------- | --------------------------------------------------------------- |
| working dir      | the task's (`AgentContext.workdir`, e.g. a Dockerfile's `/app`), |
|                  | entered before anything else runs; "" is the sandbox's WORKDIR  |
| environment      | the task's (`AgentContext.env`), the harness's own over it      |
| model access     | its own config and env (`ModelAccess`); the proxy's forwarder   |
|                  | is already listening: the service started it                    |
| deadline, cancel | killed with its children (`wait_or_kill`)                       |

A harness keeps its own state (config, install, launcher, transcripts) at absolute paths
in directories of its own under HOME (`Agent.state_dirs`), never relative to the working
directory: so none of it is in the task's workdir, unless the workdir is HOME or above it
(`/home/user`, `/home`), and even then collection skips them (`/` is never collected).
"""

from __future__ import annotations

from collections.abc import Mapping

from service.agents.base import AgentContext, AgentOutcome
from service.sandboxes import BackgroundProcess, OutputCallback, Sandbox, in_workdir, wait_or_kill

__all__ = ["run_in_task", "task_launch", "wait_for_agent"]


def task_launch(
    context: AgentContext, command: str, env: Mapping[str, str]
) -> tuple[str, dict[str, str]]:
    """What `run_in_task` starts: `command` in the task's workdir, and the task's
    environment with `env` over it."""
    return in_workdir(context.workdir, command), dict(context.env) | dict(env)


async def run_in_task(
    sandbox: Sandbox,
    context: AgentContext,
    command: str,
    *,
    env: Mapping[str, str],
    on_output: OutputCallback,
) -> AgentOutcome:
    """Run a harness's `command` to `context.timeout_s` as Harbor runs agents: in the
    task's workdir, with the task's environment and `env` (the harness's own) over it."""
    launched, launched_env = task_launch(context, command, env)
    process = await sandbox.spawn(launched, env=launched_env, on_output=on_output)
    return await wait_for_agent(process, context)


async def wait_for_agent(process: BackgroundProcess, context: AgentContext) -> AgentOutcome:
    """Its outcome at exit, or once it has been killed at `context`'s deadline."""
    # Kills it, children too; time the model calls were paused is not counted.
    result = await wait_or_kill(process, context.timeout_s, paused_s=context.paused_s)
    if result is None:
        return AgentOutcome(exit_code=None, timed_out=True, log_tail="")
    tail = result.stdout + result.stderr
    return AgentOutcome(exit_code=result.exit_code, timed_out=False, log_tail=tail)
