"""The options `rollout` commands share: --target, --json, --label, and --version."""

from __future__ import annotations

from importlib import metadata
from typing import Annotated

import typer

__all__ = ["AsJson", "LabelFlags", "Target", "Version"]


def _print_version(wanted: bool) -> None:
    if wanted:
        typer.echo(f"rollout {metadata.version('rollout-client')}")
        raise typer.Exit()


Version = Annotated[
    bool,
    typer.Option(
        "--version", help="Print the version and exit.", callback=_print_version, is_eager=True
    ),
]

Target = Annotated[
    str,
    typer.Option("--target", envvar="ROLLOUT_TARGET", help="The server's host:port."),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print proto JSON instead of text.")]
LabelFlags = Annotated[
    list[str] | None, typer.Option("--label", help="A key=value label (repeatable).")
]
