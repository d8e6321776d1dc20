"""`rollout serve`: the server, started from the command line (the server's own package,
imported only then: the client does not depend on it).

The server reads its flags itself (pydantic-settings, `service.config.Settings`); `--help` is
written here instead, from the same settings, in the style of the other commands: grouped in
panels, a metavar a person reads (`PATH`, `HOST:PORT`, `SECONDS`), each flag's variable and
default.
"""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import typer

from rollout_client.exits import fail

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
_METAVARS: Mapping[type, str] = {
    bool: "true|false",
    int: "N",
    float: "X",
    str: "TEXT",
    Path: "PATH",
}


def serve(ctx: typer.Context) -> None:
    """Start the server (`rollout serve --help` lists its flags)."""
    try:
        # Imported here: the client distribution does not depend on the server's packages.
        server = importlib.import_module("service.server")
    except ModuleNotFoundError as exc:
        fail(f"`rollout serve` needs the server ({exc.name} is missing): install rollout-service")
    if any(arg in _HELP for arg in ctx.args):
        _print_help(importlib.import_module("service.config").Settings)
    raise typer.Exit(server.main(list(ctx.args)) or 0)


def _print_help(settings: Any) -> None:
    """The server's flags as a command of their own, printed by typer as every command is."""
    parameters = [_parameter(name, field) for name, field in settings.model_fields.items()]
    show = typer.Typer(add_completion=False, rich_markup_mode="rich")

    def _flags(**_: object) -> None: ...

    _flags.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    _flags.__annotations__ = {p.name: p.annotation for p in parameters}
    show.command(help=" ".join(settings.__doc__.split()))(_flags)
    show(["--help"], prog_name="rollout serve")


def _parameter(name: str, field: Any) -> inspect.Parameter:
    option = typer.Option(
        "--" + name.replace("_", "-"),
        metavar=_metavar(name, field.annotation),
        help=" ".join((field.description or "").split()),
        rich_help_panel=_panel(name),
    )
    default = field.default
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


def _metavar(name: str, annotation: Any) -> str:
    if get_origin(annotation) in (types.UnionType, Union):  # X | None: as X
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    if get_origin(annotation) in (list, dict):
        return "JSON"
    if name == "listen" or name.endswith("_listen"):
        return "HOST:PORT"
    if annotation is float and name.endswith("_s"):
        return "SECONDS"
    return _METAVARS.get(annotation, "TEXT")


def _panel(name: str) -> str:
    for title, prefixes in _PANELS:
        if name.startswith(prefixes):
            return title
    return _OTHER_PANEL
