"""The options `rollout` commands share: --json, --label and --version (the connection's
are in `rollout_client.cli_connection`, the spec's in `rollout_client.spec_flags`)."""

from __future__ import annotations

from importlib import metadata
from typing import Annotated

import typer

__all__ = ["AsJson", "LabelFlags", "Version"]


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

AsJson = Annotated[bool, typer.Option("--json", help="Print proto JSON instead of text.")]
LabelFlags = Annotated[
    list[str] | None, typer.Option("--label", metavar="KEY=VALUE", help="A label (repeatable).")
]
