"""`rollout export ID [--format atif|train] [--output FILE]`: one rollout as a file other tools
load (an ATIF JSON document, the default, or training records as JSONL, one line per turn)."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated

import typer
from rollout.v1 import rollout_pb2 as pb

from rollout_client.cli_connection import Connection, with_connection
from rollout_client.exits import fail
from rollout_client.export.atif import to_atif
from rollout_client.export.train import to_train_records
from rollout_client.inert import inert_json

__all__ = ["ExportFormat", "export", "render"]


class ExportFormat(enum.StrEnum):
    """What `rollout export` writes."""

    ATIF = "atif"
    TRAIN = "train"


def render(rollout: pb.Rollout, export_format: ExportFormat) -> str:
    """The file's text: ATIF as one indented JSON document, training records as JSONL."""
    if export_format is ExportFormat.ATIF:
        return inert_json(json.dumps(to_atif(rollout), indent=2, ensure_ascii=False)) + "\n"
    records = to_train_records(rollout)
    return "".join(json.dumps(record, separators=(",", ":")) + "\n" for record in records)


@with_connection
def export(
    rollout_id: Annotated[str, typer.Argument(help="The rollout's id.")],
    connection: Connection,
    export_format: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            help="atif: Harbor's trajectory (ATIF-v1.4 JSON); train: one JSONL record per turn.",
        ),
    ] = ExportFormat.ATIF,
    output: Annotated[
        Path | None,
        typer.Option(help="Write here instead of stdout.", dir_okay=False, show_default=False),
    ] = None,
) -> None:
    """Export a rollout as Harbor's trajectory format (ATIF) or as training records."""
    with connection.errors(), connection.client() as client:
        rollout = client.get(rollout_id, view=pb.RESULT_VIEW_FULL)
    text = render(rollout, export_format)
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"--output {output}: {exc.strerror or exc}")
