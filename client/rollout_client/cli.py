"""The `rollout` command line: serve, run, watch, get, list and cancel rollouts.

Exit codes:

    0    done; for `run` and `watch`: the rollout SUCCEEDED (its reward says how well)
    1    error: bad spec file, request rejected (INVALID_ARGUMENT), unknown id, server
         unreachable or at capacity; one line on stderr says which
    2    bad usage (unknown option, missing argument, label not key=value)
    3    the rollout FAILED (the error kind tells infrastructure from task failure)
    4    the rollout TIMED_OUT
    5    the rollout was CANCELLED
    130  interrupted (Ctrl-C); `run` cancels its rollout first
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from rollout.v1 import rollout_pb2 as pb

from rollout_client.cli_connection import connect, connection_options
from rollout_client.client import RolloutClient
from rollout_client.errors import (
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    SpecError,
    StatusError,
    UnauthenticatedError,
    UnavailableError,
)
from rollout_client.live import follow
from rollout_client.messages import DEFAULT_TARGET, parse_status
from rollout_client.render import message_json, rollout_summary, rollouts_table, status_name
from rollout_client.specfile import SpecOverrides, build_spec, parse_labels

__all__ = ["EXIT_CODES", "EXIT_ERROR", "app", "main"]

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130
EXIT_CODES = {
    pb.ROLLOUT_STATUS_SUCCEEDED: 0,
    pb.ROLLOUT_STATUS_FAILED: 3,
    pb.ROLLOUT_STATUS_TIMED_OUT: 4,
    pb.ROLLOUT_STATUS_CANCELLED: 5,
}

app = typer.Typer(
    help="Run and inspect coding-agent rollouts on a rollout-service server.",
    epilog=(
        "Exit codes: 0 done (run/watch: SUCCEEDED), 1 error, 2 bad usage, 3 FAILED,"
        " 4 TIMED_OUT, 5 CANCELLED, 130 interrupted."
    ),
    no_args_is_help=True,
    add_completion=False,
    # A traceback's locals could hold a spec's endpoint.api_key.
    pretty_exceptions_show_locals=False,
)
app.callback()(connection_options)

Target = Annotated[
    str, typer.Option("--target", envvar="ROLLOUT_TARGET", help="The server's host:port.")
]
AsJson = Annotated[bool, typer.Option("--json", help="Print proto JSON instead of text.")]
LabelFlags = Annotated[
    list[str] | None, typer.Option("--label", help="A key=value label (repeatable).")
]


def _stdout() -> Console:
    return Console(soft_wrap=True, highlight=False)


def _fail(message: str) -> NoReturn:
    Console(stderr=True, soft_wrap=True, highlight=False).print(
        Text(f"error: {message}", style="red")
    )
    raise typer.Exit(EXIT_ERROR)


@contextmanager
def _client_errors(target: str) -> Iterator[None]:
    """Turn client errors into one line on stderr and exit code 1."""
    try:
        yield
    except SpecError as exc:
        _fail(str(exc))
    except InvalidArgumentError as exc:
        fields = "; ".join(map(str, exc.field_violations)) or exc.details
        _fail(f"invalid request: {fields}")
    except NotFoundError as exc:
        _fail(f"not found: {exc.details}")
    except ResourceExhaustedError as exc:
        wait = f"{exc.retry_delay_s:g}s" if exc.retry_delay_s is not None else "a while"
        _fail(f"server at capacity ({exc.details}): retry in {wait}")
    except UnauthenticatedError as exc:
        _fail(f"not authenticated ({exc.details}): pass --token-file or set ROLLOUT_TOKEN")
    except UnavailableError as exc:
        _fail(f"server unavailable ({exc.details}): is the server running at {target}?")
    except StatusError as exc:
        _fail(str(exc))


def _labels(flags: list[str] | None) -> dict[str, str]:
    try:
        return parse_labels(flags or ())
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--label") from exc


def _exit_for(rollout: pb.Rollout) -> NoReturn:
    raise typer.Exit(EXIT_CODES.get(rollout.status, EXIT_ERROR))


def _print_summary(console: Console, rollout: pb.Rollout) -> None:
    for line in rollout_summary(rollout):
        console.print(line)


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def serve(ctx: typer.Context) -> None:
    """Start the server; every option is the server's (`rollout serve --help` lists them)."""
    try:
        # Imported here: the client distribution does not depend on the server's packages.
        server = importlib.import_module("service.server")
    except ModuleNotFoundError as exc:
        _fail(f"`rollout serve` needs the server ({exc.name} is missing): install rollout-service")
    raise typer.Exit(server.main(list(ctx.args)) or 0)


@app.command()
def run(
    spec_file: Annotated[
        Path | None,
        typer.Argument(help="A RolloutSpec in YAML, JSON or TOML.", show_default=False),
    ] = None,
    instruction: Annotated[str | None, typer.Option(help="The task's instruction.")] = None,
    setup: Annotated[
        list[str] | None, typer.Option("--setup", help="A setup command (repeatable).")
    ] = None,
    verify: Annotated[
        list[str] | None, typer.Option("--verify", help="A verify command (repeatable).")
    ] = None,
    agent: Annotated[str | None, typer.Option(help='The agent: "command" or "opencode".')] = None,
    agent_command: Annotated[
        str | None, typer.Option(help='The shell command of the "command" agent.')
    ] = None,
    label: LabelFlags = None,
    timeout: Annotated[
        float | None, typer.Option(help="The agent's time budget, in seconds.", min=0)
    ] = None,
    backend: Annotated[str | None, typer.Option(help='Sandbox backend: "local" or "e2b".')] = None,
    request_id: Annotated[str | None, typer.Option(help="Idempotency key.")] = None,
    target: Target = DEFAULT_TARGET,
    as_json: AsJson = False,
) -> None:
    """Run one rollout and show its progress.

    Flags override the spec file's values (--setup and --verify replace its lists); with
    --instruction, the spec file is optional.

    Exits 0 when the rollout SUCCEEDED, 3 FAILED, 4 TIMED_OUT, 5 CANCELLED, 1 on errors.
    """
    overrides = SpecOverrides(
        instruction=instruction,
        setup=tuple(setup or ()),
        verify=tuple(verify or ()),
        agent=agent,
        agent_command=agent_command,
        labels=_labels(label),
        agent_timeout_s=timeout,
        backend=backend,
        request_id=request_id,
    )
    with _client_errors(target):
        spec = build_spec(spec_file, overrides)
        with connect(target) as client:
            if as_json:
                rollout = client.run(spec)
                typer.echo(message_json(rollout))
            else:
                rollout = _run_live(client, spec, _stdout())
    _exit_for(rollout)


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
    _print_summary(console, rollout)
    return rollout


@app.command()
def watch(
    rollout_id: Annotated[str, typer.Argument(help="The rollout's id.")],
    after_seq: Annotated[int, typer.Option(help="Skip events up to this seq.", min=0)] = 0,
    target: Target = DEFAULT_TARGET,
    as_json: AsJson = False,
) -> None:
    """Follow a rollout's events live (replayed from the start) until it ends.

    --json prints one event per line. Exit codes as for `run`.
    """
    with _client_errors(target), connect(target) as client:
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
        _fail(f"the event stream ended while rollout {rollout_id} is {status_name(rollout.status)}")
    _exit_for(rollout)


@app.command()
def get(
    rollout_id: Annotated[str, typer.Argument(help="The rollout's id.")],
    slim: Annotated[bool, typer.Option(help="Leave out turns, files and the agent log.")] = False,
    target: Target = DEFAULT_TARGET,
    as_json: AsJson = False,
) -> None:
    """Show one rollout."""
    view = pb.RESULT_VIEW_SLIM if slim else pb.RESULT_VIEW_FULL
    with _client_errors(target), connect(target) as client:
        rollout = client.get(rollout_id, view=view)
    if as_json:
        typer.echo(message_json(rollout))
    else:
        _print_summary(_stdout(), rollout)


@app.command("list")
def list_rollouts(
    label: LabelFlags = None,
    status: Annotated[
        list[str] | None,
        typer.Option(help="Only this status, e.g. FAILED (repeatable).", show_default=False),
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many rollouts.", min=1)] = 50,
    target: Target = DEFAULT_TARGET,
    as_json: AsJson = False,
) -> None:
    """List rollouts, newest first."""
    try:
        statuses = [parse_status(s) for s in status or ()]
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--status") from exc
    with _client_errors(target), connect(target) as client:
        found = client.list_all(labels=_labels(label), statuses=statuses, page_size=min(limit, 500))
        rollouts = list(itertools.islice(found, limit))
    if as_json:
        typer.echo(message_json(pb.ListRolloutsResponse(rollouts=rollouts)))
    elif rollouts:
        _stdout().print(rollouts_table(rollouts))
    else:
        _stdout().print("no rollouts")


@app.command()
def cancel(
    rollout_id: Annotated[str, typer.Argument(help="The rollout's id.")],
    reason: Annotated[str, typer.Option(help="Recorded in the rollout's error.")] = (
        "cancelled from the rollout command line"
    ),
    target: Target = DEFAULT_TARGET,
    as_json: AsJson = False,
) -> None:
    """Cancel a rollout (a finished rollout is left as it is)."""
    with _client_errors(target), connect(target) as client:
        rollout = client.cancel(rollout_id, reason)
    if as_json:
        typer.echo(message_json(rollout))
    else:
        _stdout().print(Text(f"rollout {rollout.id}: {status_name(rollout.status)}"))


def main() -> None:
    app()
