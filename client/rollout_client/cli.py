"""The `rollout` command line: serve, run, start, batch, watch, get, list, cancel and export
rollouts.

Exit codes are listed in `rollout_client.exits` (and in `rollout --help`).
"""

from __future__ import annotations

import itertools
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from rollout.v1 import rollout_pb2 as pb

from rollout_client.batch_command import batch
from rollout_client.cli_connection import Connection, remember_global, with_connection
from rollout_client.exits import (
    EXIT_CODES,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_SUMMARY,
    exit_for,
    fail,
)
from rollout_client.export.command import export
from rollout_client.group_command import group_app
from rollout_client.live import follow, follow_all
from rollout_client.messages import parse_status
from rollout_client.options import AsJson, LabelFlags, Version
from rollout_client.render import message_json, rollout_summary, rollouts_table, status_name
from rollout_client.run_command import run, start
from rollout_client.serve_command import serve
from rollout_client.spec_flags import labels_of

__all__ = ["EXIT_CODES", "EXIT_ERROR", "app", "main"]

app = typer.Typer(
    help="Run and inspect coding-agent rollouts on a rollout-service server.",
    epilog=EXIT_SUMMARY,
    no_args_is_help=True,
    add_completion=False,
    # A traceback's locals could hold a spec's endpoint.api_key.
    pretty_exceptions_show_locals=False,
)
app.command()(run)
app.command()(start)
app.command()(batch)
app.add_typer(group_app, name="group")
app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)(serve)
app.command()(export)


@app.callback()
@with_connection
def _before_the_command(connection: Connection, version: Version = False) -> None:
    """Run and inspect coding-agent rollouts on a rollout-service server."""
    remember_global(connection)


def _stdout() -> Console:
    return Console(soft_wrap=True, highlight=False)


def _print_summary(console: Console, rollout: pb.Rollout) -> None:
    for line in rollout_summary(rollout):
        console.print(line)


@app.command()
@with_connection
def watch(
    connection: Connection,
    rollout_id: Annotated[
        str | None, typer.Argument(help="The rollout's id.", show_default=False)
    ] = None,
    label: LabelFlags = None,
    after_seq: Annotated[int, typer.Option(help="Skip events up to this seq.", min=0)] = 0,
    as_json: AsJson = False,
) -> None:
    """Follow a rollout's events live (replayed from the start) until it ends.

    With --label instead of an id: the live events of every rollout carrying the labels,
    each line after its rollout's short id, until Ctrl-C.

    --json prints one event per line. Exit codes as for `run`.
    """
    if label:
        _watch_labels(connection, labels_of(label), rollout_id, after_seq, as_json)
    if rollout_id is None:
        raise typer.BadParameter("give a rollout's id, or --label", param_hint="ROLLOUT_ID")
    with connection.errors(), connection.client() as client:
        events = client.watch(rollout_id, after_seq=after_seq)
        if as_json:
            for event in events:
                typer.echo(message_json(event, compact=True))
        else:
            follow(events, _stdout())
        # The stream is empty when after_seq is past the end: ask for the outcome.
        rollout = client.get(rollout_id, view=pb.RESULT_VIEW_SLIM)
        if not as_json:
            _print_summary(_stdout(), rollout)
    if rollout.status not in EXIT_CODES:
        fail(f"the event stream ended while rollout {rollout_id} is {status_name(rollout.status)}")
    exit_for(rollout)


def _watch_labels(
    connection: Connection,
    labels: dict[str, str],
    rollout_id: str | None,
    after_seq: int,
    as_json: bool,
) -> NoReturn:
    """`watch --label`: every matching rollout's live events, until Ctrl-C (exit 130)."""
    if rollout_id is not None or after_seq:
        hint = "ROLLOUT_ID" if rollout_id is not None else "--after-seq"
        raise typer.BadParameter("--label watches every rollout carrying it", param_hint=hint)
    try:
        with connection.errors(), connection.client() as client:
            events = client.watch(labels=labels)
            if as_json:
                for event in events:
                    typer.echo(message_json(event, compact=True))
            else:
                follow_all(events, _stdout())
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None
    fail("the server ended the watch")


@app.command()
@with_connection
def get(
    rollout_id: Annotated[str, typer.Argument(help="The rollout's id.")],
    connection: Connection,
    slim: Annotated[bool, typer.Option(help="Leave out turns, files and the agent log.")] = False,
    as_json: AsJson = False,
) -> None:
    """Show one rollout."""
    view = pb.RESULT_VIEW_SLIM if slim else pb.RESULT_VIEW_FULL
    with connection.errors(), connection.client() as client:
        rollout = client.get(rollout_id, view=view)
    if as_json:
        typer.echo(message_json(rollout))
    else:
        _print_summary(_stdout(), rollout)


@app.command("list")
@with_connection
def list_rollouts(
    connection: Connection,
    label: LabelFlags = None,
    status: Annotated[
        list[str] | None,
        typer.Option(help="Only this status, e.g. FAILED (repeatable).", show_default=False),
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many rollouts.", min=1)] = 50,
    as_json: AsJson = False,
) -> None:
    """List rollouts, newest first."""
    try:
        statuses = [parse_status(s) for s in status or ()]
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--status") from exc
    with connection.errors(), connection.client() as client:
        found = client.list_all(
            labels=labels_of(label), statuses=statuses, page_size=min(limit, 500)
        )
        rollouts = list(itertools.islice(found, limit))
    if as_json:
        typer.echo(message_json(pb.ListRolloutsResponse(rollouts=rollouts)))
    elif rollouts:
        _stdout().print(rollouts_table(rollouts))
    else:
        _stdout().print("no rollouts")


@app.command()
@with_connection
def cancel(
    rollout_id: Annotated[str, typer.Argument(help="The rollout's id.")],
    connection: Connection,
    reason: Annotated[str, typer.Option(help="Recorded in the rollout's error.")] = (
        "cancelled from the rollout command line"
    ),
    as_json: AsJson = False,
) -> None:
    """Cancel a rollout (a finished rollout is left as it is)."""
    with connection.errors(), connection.client() as client:
        rollout = client.cancel(rollout_id, reason)
    if as_json:
        typer.echo(message_json(rollout))
    else:
        _stdout().print(Text(f"rollout {rollout.id}: {status_name(rollout.status)}"))


def main() -> None:
    app()
