"""opencode's launcher finds the server's `rg` when the venv that holds it is not activated."""

from __future__ import annotations

import subprocess

from service.agents.opencode_config import launcher_script


def test_the_tools_dir_is_appended_to_path_whatever_its_name() -> None:
    script = launcher_script("/bin/echo", "/opt/my venv/bin").decode()
    # Run the PATH line as the sandbox's bash would, then print the result.
    path_line = script.splitlines()[0]

    shown = subprocess.run(
        ["bash", "-c", f'{path_line}\nprintf %s "$PATH"'],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )

    assert shown.stdout == "/usr/bin:/bin:/opt/my venv/bin"


def test_no_tools_dir_leaves_path_alone() -> None:
    assert "PATH" not in launcher_script("/bin/echo").decode()
