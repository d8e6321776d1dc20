"""The client stays light: importing it pulls in none of the server's dependencies."""

from __future__ import annotations

import json
import subprocess
import sys

SERVER_ONLY = ("service", "pydantic_settings", "e2b", "opentelemetry.sdk")


def test_importing_the_client_and_cli_imports_nothing_of_the_server() -> None:
    code = (
        "import json, sys\n"
        "import rollout_client, rollout_client.cli\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    modules = json.loads(done.stdout)
    assert "rollout_client.cli" in modules
    leaked = [m for m in modules if any(m == s or m.startswith(s + ".") for s in SERVER_ONLY)]
    assert leaked == []
