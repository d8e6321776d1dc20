"""The options every `rollout` command that talks to a server shares."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["AsJson", "LabelFlags", "Target"]

Target = Annotated[
    str,
    typer.Option("--target", envvar="ROLLOUT_TARGET", help="The server's host:port."),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print proto JSON instead of text.")]
LabelFlags = Annotated[
    list[str] | None, typer.Option("--label", help="A key=value label (repeatable).")
]
