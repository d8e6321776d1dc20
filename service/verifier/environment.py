"""What every verify command runs with, over the task's own environment.

The verifier's programs are setup's (`service.engine.verification`), but some of them
read configuration from where they run, and the verify commands run in the agent's
workdir, which is the agent's. So each is told not to:

    PYTHONSAFEPATH=1         Python 3.11+ puts neither the working directory nor a
                             script's directory first on sys.path: `python -m pytest`
                             in the workdir imports no `pytest.py` the agent left there
                             (older Pythons ignore it: docs/security.md says so)
    PYTHONPYCACHEPREFIX      bytecode lives in a directory made empty for the verifier
                             (`BYTECODE_DIR`): no .pyc the agent planted is loaded
    GIT_CONFIG_COUNT/KEY/VALUE  git's settings that run a program, fixed above any
                             repository's own .git/config (the agent's, in its workdir):
                             core.fsmonitor, core.hooksPath, core.pager, core.editor,
                             sequence.editor, core.sshCommand
"""

from __future__ import annotations

__all__ = ["BYTECODE_DIR", "VERIFIER_ENV"]

BYTECODE_DIR = "/tmp/.rollout-verifier-pycache"
"""Python's bytecode cache for verify commands (PYTHONPYCACHEPREFIX): made empty once
the agent's processes are dead, so bytecode the agent planted is never loaded."""

_GIT_FIXED = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("sequence.editor", "true"),
    ("core.sshCommand", "ssh"),
)


def _git_config() -> dict[str, str]:
    env = {"GIT_CONFIG_COUNT": str(len(_GIT_FIXED))}
    for index, (key, value) in enumerate(_GIT_FIXED):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


VERIFIER_ENV = {"PYTHONSAFEPATH": "1", "PYTHONPYCACHEPREFIX": BYTECODE_DIR, **_git_config()}
"""Set over the task's `env` and `verifier_env` for every verify command."""
