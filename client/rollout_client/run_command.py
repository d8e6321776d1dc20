"""`rollout run`: one rollout from a spec file and/or flags, followed live to its end;
`rollout start`: the same rollout, started and left to run (detached)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text
from rollout.v1 import rollout_pb2 as pb

from rollout_client.cli_connection import Connection, with_connection
from rollout_client.client import RolloutClient
from rollout_client.exits import EXIT_INTERRUPTED, exit_for
from rollout_client.live import follow
from rollout_client.local_server import Local, served
from rollout_client.options import AsJson
from rollout_client.render import message_json, rollout_summary, seconds
from rollout_client.spec_flags import need_a_task, with_spec_flags
from rollout_client.specfile import SpecOverrides, build_spec

__all__ = ["run", "start"]

_QUICK_CONNECT_S = 0.5

SpecFile = Annotated[
    Path | None, typer.Argument(help="A RolloutSpec in YAML, JSON or TOML.", show_default=False)
]
WaitForServer = Annotated[
    float, typer.Option(help="Seconds to wait for a server that is still starting.", min=0)
]


@with_connection
@with_spec_flags
def run(
    connection: Connection,
    overrides: SpecOverrides,
    spec_file: SpecFile = None,
    require_reward: Annotated[
        float | None,
        typer.Option(
            metavar="X",
            help="Exit 6 unless the rollout SUCCEEDED with a reward of at least X.",
            show_default=False,
        ),
    ] = None,
    wait_for_server: WaitForServer = 10.0,
    local: Local = False,
    as_json: AsJson = False,
) -> None:
    """Run one rollout and show its progress.

    Flags override the spec file's values (--setup and --verify replace its lists; --env,
    --file, --agent-option and --label are set over its maps).

    With --instruction, --harbor-task or --harbor-dir, the spec file is optional. With
    --local, the command starts a server of its own and stops it at the end.

    Exits 0 SUCCEEDED, 1 error, 2 bad usage, 3 FAILED, 4 TIMED_OUT, 5 CANCELLED, 6 reward low.
    """
    need_a_task(spec_file, overrides)
    spec = _spec(spec_file, overrides, connection)
    with (
        served(connection, local) as connection,
        connection.errors(),
        connection.client() as client,
    ):
        _wait_for_server(client, wait_for_server)
        if as_json:
            rollout = client.run(spec)
            typer.echo(message_json(rollout))
        else:
            rollout = _run_live(client, spec, Console(soft_wrap=True, highlight=False))
    exit_for(rollout, require_reward)


@with_connection
@with_spec_flags
def start(
    connection: Connection,
    overrides: SpecOverrides,
    spec_file: SpecFile = None,
    wait_for_server: WaitForServer = 10.0,
    as_json: AsJson = False,
) -> None:
    """Start one rollout, print its id and leave it running (detached).

    The spec file and flags are those of `run`. `rollout watch ID` follows it, `rollout get
    ID` shows it, `rollout cancel ID` stops it. --json prints the started rollout.
    """
    need_a_task(spec_file, overrides)
    spec = _spec(spec_file, overrides, connection)
    with connection.errors(), connection.client() as client:
        _wait_for_server(client, wait_for_server)
        started = client.start(spec)
    typer.echo(message_json(started) if as_json else started.id)


def _spec(
    spec_file: Path | None, overrides: SpecOverrides, connection: Connection
) -> pb.RolloutSpec:
    """The spec, built before any server starts: a bad one costs no start-up."""
    with connection.errors():
        return build_spec(spec_file, overrides)


def _wait_for_server(client: RolloutClient, timeout_s: float) -> None:
    """Give a server that is still starting (`make run &`) a few seconds, saying so; if it
    is still not there, the call that follows says why (refused, TLS, ...)."""
    if client.wait_until_ready(min(_QUICK_CONNECT_S, timeout_s)):
        return
    Console(stderr=True, highlight=False).print(
        f"waiting up to {seconds(timeout_s)} for the server at {client.target} to start ...",
        style="dim",
    )
    client.wait_until_ready(timeout_s)


def _run_live(client: RolloutClient, spec: pb.RolloutSpec, console: Console) -> pb.Rollout:
    """Start, follow the events, then fetch the result; Ctrl-C cancels the rollout."""
    started = client.start(spec)
    console.print(Text.assemble("rollout ", (started.id, "bold"), " started"))
    try:
        follow(client.watch(started.id), console)
    except KeyboardInterrupt:
        client.cancel(started.id, "interrupted from the rollout command line")
        Console(stderr=True).print(f"interrupted: rollout {started.id} cancelled")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    rollout = client.get(started.id, view=pb.RESULT_VIEW_SLIM)
    for line in rollout_summary(rollout):
        console.print(line)
    return rollout
