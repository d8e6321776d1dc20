"""`rollout serve`: the server, started from the command line. The server is its own
distribution: the command runs its entry point (`python -m service.server`) in this process's
place, so signals and the exit code are the server's, and never imports it.

The server reads its flags itself (pydantic-settings, `service.config.Settings`); `--help` is
written here instead, from the JSON schema of the same settings (which the server prints with
`--settings-schema`), in the style of the other commands: grouped in panels, a metavar a person
reads (`PATH`, `HOST:PORT`, `SECONDS`), each flag's variable and default.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Annotated, Any

import typer

from rollout_client.exits import fail
from rollout_client.server_process import require_server, server_argv

__all__ = ["serve"]

_HELP = ("--help", "-h")
_PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Listen, authentication and TLS", ("listen", "auth_", "tls_", "allow_insecure_")),
    ("Storage", ("state_dir", "cache_dir", "database")),
    ("Sandboxes", ("sandbox_", "local_", "default_backend")),
    ("Capture proxy and model calls", ("proxy_", "upstream_", "model_call_", "pause_")),
    ("Images and Harbor tasks", ("task_roots", "harbor_", "image_")),
    ("Agents", ("opencode_", "allow_private_endpoints")),
    ("E2B", ("e2b_",)),
    ("Observability", ("log_level", "metrics_", "dashboard_", "health_", "instance_")),
)
_OTHER_PANEL = "Rollouts: capacity, budgets and sizes"
_METAVARS: Mapping[str, str] = {
    "boolean": "true|false",
    "integer": "N",
    "number": "X",
    "string": "TEXT",
}
_SETTINGS_SCHEMA_FLAG = "--settings-schema"


def serve(ctx: typer.Context) -> None:
    """Start the server (`rollout serve --help` lists its flags)."""
    require_server("`rollout serve`")
    if any(arg in _HELP for arg in ctx.args):
        _print_help(_settings_schema())
        raise typer.Exit(0)
    sys.stdout.flush()
    sys.stderr.flush()
    argv = server_argv(*ctx.args)
    os.execv(argv[0], argv)


def _settings_schema() -> dict[str, Any]:
    """The server's settings as JSON schema, from the server itself."""
    done = subprocess.run(
        server_argv(_SETTINGS_SCHEMA_FLAG), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        fail(f"the server did not describe its flags: {done.stderr.strip() or done.returncode}")
    schema: dict[str, Any] = json.loads(done.stdout)
    return schema


def _print_help(schema: Mapping[str, Any]) -> None:
    """The server's flags as a command of their own, printed by typer as every command is."""
    parameters = [_parameter(name, field) for name, field in schema["properties"].items()]
    show = typer.Typer(add_completion=False, rich_markup_mode="rich")

    def _flags(**_: object) -> None: ...

    _flags.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    _flags.__annotations__ = {p.name: p.annotation for p in parameters}
    show.command(help=" ".join(schema.get("description", "").split()))(_flags)
    show(["--help"], prog_name="rollout serve")


def _parameter(name: str, field: Mapping[str, Any]) -> inspect.Parameter:
    option = typer.Option(
        "--" + name.replace("_", "-"),
        metavar=_metavar(name, field),
        help=" ".join(field.get("description", "").split()),
        rich_help_panel=_panel(name),
    )
    default = field.get("default")
    shown = (
        None
        if default in (None, "", [], {})
        else str(default).lower()
        if isinstance(default, bool)
        else str(default)
    )
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=shown,
        annotation=Annotated[str | None, option],
    )


def _metavar(name: str, field: Mapping[str, Any]) -> str:
    # X | None: as X
    field = next((f for f in field.get("anyOf", ()) if f.get("type") != "null"), field)
    kind = field.get("type")
    if kind in ("array", "object"):
        return "JSON"
    if kind == "string" and (name == "listen" or name.endswith("_listen")):
        return "HOST:PORT"
    if kind == "number" and name.endswith("_s"):
        return "SECONDS"
    if kind == "string" and field.get("format") == "path":
        return "PATH"
    return _METAVARS.get(kind or "", "TEXT")


def _panel(name: str) -> str:
    for title, prefixes in _PANELS:
        if name.startswith(prefixes):
            return title
    return _OTHER_PANEL
