"""`rollout group run|watch|get|list|cancel`: groups of n rollouts of one spec (GRPO).

Exit codes as for `rollout run`, by the group's status: 0 COMPLETED, 3 FAILED, 4 TIMED_OUT,
5 CANCELLED, 1 error, 2 bad usage.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text
from rollout.v1 import rollout_pb2 as pb

from rollout_client.cli_connection import Connection, with_connection
from rollout_client.exits import EXIT_ERROR, EXIT_INTERRUPTED
from rollout_client.inert import inert
from rollout_client.messages import group_spec, parse_group_status
from rollout_client.options import AsJson, LabelFlags
from rollout_client.render import figure, message_json, status_name
from rollout_client.spec_flags import labels_of, need_a_task, with_spec_flags
from rollout_client.specfile import SpecOverrides, build_spec

__all__ = ["group_app"]

group_app = typer.Typer(help="Run and inspect groups: n rollouts of one spec, scored together.")

_EXIT_CODES = {
    pb.GROUP_STATUS_COMPLETED: 0,
    pb.GROUP_STATUS_FAILED: 3,
    pb.GROUP_STATUS_TIMED_OUT: 4,
    pb.GROUP_STATUS_CANCELLED: 5,
}

GroupId = Annotated[str, typer.Argument(help="The group's id.")]


def _console() -> Console:
    """Plain text, never markup: a group's error message may quote an agent's."""
    return Console(soft_wrap=True, highlight=False, markup=False)


def _member_line(rollout: pb.Rollout) -> str:
    reward = (
        f"reward {figure(rollout.result.reward)}"
        if rollout.result.HasField("reward")
        else "no reward"
    )
    kind = pb.ErrorKind.Name(rollout.result.error.kind).removeprefix("ERROR_KIND_")
    error = f" ({kind})" if rollout.result.HasField("error") else ""
    status = status_name(rollout.status)
    return f"member {rollout.member_index} {rollout.id}: {status}{error}, {reward}"


def _summary(group: pb.Group) -> list[str]:
    stats = group.stats
    status = pb.GroupStatus.Name(group.status).removeprefix("GROUP_STATUS_")
    lines = [f"group {group.id}: {status}"]
    if group.HasField("error"):
        lines.append(f"  error: {inert(group.error.message)}")
    mean = figure(stats.reward_mean) if stats.HasField("reward_mean") else "-"
    stddev = figure(stats.reward_stddev) if stats.HasField("reward_stddev") else "-"
    lines.append(
        f"  counted {stats.counted}, rewarded {stats.rewarded}, reward mean {mean} "
        f"stddev {stddev}, refills {stats.refills}, template setups {group.template_setups}"
    )
    return lines


def _finish(group: pb.Group, as_json: bool, *, streamed: bool = False) -> NoReturn:
    """Show the group (unless `_follow` already wrote it as JSON) and exit for its status."""
    if as_json and not streamed:
        typer.echo(message_json(group))
    elif not as_json:
        console = _console()
        for line in _summary(group):
            console.print(line)
    raise typer.Exit(_EXIT_CODES.get(group.status, EXIT_ERROR))


def _follow(client_watch: Iterable[pb.WatchGroupResponse], as_json: bool) -> pb.Group:
    """Show each member as it ends, and return the group. With --json, JSON lines: every
    WatchGroupResponse on a line of its own (`{"member": ...}`, the last `{"group": ...}`)."""
    console = _console()
    for response in client_watch:
        if as_json:
            typer.echo(message_json(response, compact=True))
        elif response.HasField("member"):
            console.print(_member_line(response.member))
        if response.HasField("group"):
            return response.group
    raise typer.Exit(EXIT_ERROR)


@group_app.command("run")
@with_connection
@with_spec_flags
def run_group(
    connection: Connection,
    overrides: SpecOverrides,
    n: Annotated[int, typer.Option("--n", help="Members running at once.", min=1)],
    spec_file: Annotated[
        Path | None,
        typer.Argument(help="A RolloutSpec in YAML, JSON or TOML.", show_default=False),
    ] = None,
    min_complete: Annotated[
        int, typer.Option(help="Complete once this many count (0: n).", min=0)
    ] = 0,
    max_refills: Annotated[
        int | None, typer.Option(help="Infrastructure failures replaced (default: n).", min=0)
    ] = None,
    deadline: Annotated[
        float | None, typer.Option(help="The group's time budget, in seconds.", min=0)
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Run a group of n rollouts of a spec, showing each member as it ends.

    The spec is SPEC_FILE with the flags over it, as for `rollout run`; its `sampling.seed`
    is the group's seed (each member's is derived from it), its request_id the group's.
    """
    need_a_task(spec_file, overrides)
    with connection.errors():
        spec = group_spec(
            build_spec(spec_file, overrides),
            n,
            min_complete=min_complete,
            max_refills=max_refills,
            deadline_s=deadline,
        )
        with connection.client() as client:
            started = client.start_group(spec)
            if not as_json:
                _console().print(f"group {started.id} started")
            try:
                group = _follow(client.watch_group(started.id), as_json)
            except KeyboardInterrupt:
                client.cancel_group(started.id, "interrupted from the rollout command line")
                Console(stderr=True).print(f"interrupted: group {started.id} cancelled")
                raise typer.Exit(EXIT_INTERRUPTED) from None
    _finish(group, as_json, streamed=True)


@group_app.command("watch")
@with_connection
def watch_group(group_id: GroupId, connection: Connection, as_json: AsJson = False) -> None:
    """Follow a group: its members as they end (replayed from the start), then the group."""
    with connection.errors(), connection.client() as client:
        group = _follow(client.watch_group(group_id), as_json)
    _finish(group, as_json, streamed=True)


@group_app.command("get")
@with_connection
def get_group(group_id: GroupId, connection: Connection, as_json: AsJson = False) -> None:
    """Show a group, its members and statistics."""
    with connection.errors(), connection.client() as client:
        group = client.get_group(group_id)
    members = [
        f"member {m.index} {m.rollout_id}: {status_name(m.status)}"
        + (" counted" if m.counted else "")
        + (f" replaced by {m.replaced_by}" if m.replaced_by else "")
        for m in group.members
    ]
    if as_json:
        typer.echo(message_json(group))
    else:
        for line in [*members, *_summary(group)]:
            _console().print(line)


@group_app.command("list")
@with_connection
def list_groups(
    connection: Connection,
    label: LabelFlags = None,
    status: Annotated[
        list[str] | None,
        typer.Option(help="Only this status, e.g. RUNNING (repeatable).", show_default=False),
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many groups.", min=1)] = 50,
    as_json: AsJson = False,
) -> None:
    """List groups, newest first (`--label rollout.batch=ID`: a batch's groups)."""
    try:
        statuses = [parse_group_status(s) for s in status or ()]
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--status") from exc
    with connection.errors(), connection.client() as client:
        found = client.list_all_groups(
            labels=labels_of(label), statuses=statuses, page_size=min(limit, 500)
        )
        groups = list(itertools.islice(found, limit))
    if as_json:
        typer.echo(message_json(pb.ListGroupsResponse(groups=groups)))
    elif groups:
        _console().print(_groups_table(groups))
    else:
        _console().print("no groups")


def _groups_table(groups: Iterable[pb.Group]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for name in ("id", "status", "counted", "mean", "created"):
        table.add_column(name, no_wrap=True)
    table.add_column("labels", overflow="fold", min_width=12)
    for group in groups:
        stats = group.stats
        table.add_row(
            group.id,
            pb.GroupStatus.Name(group.status).removeprefix("GROUP_STATUS_"),
            f"{stats.counted}/{group.spec.min_complete or group.spec.n}",
            figure(stats.reward_mean) if stats.HasField("reward_mean") else "-",
            group.create_time.ToDatetime().strftime("%m-%d %H:%M"),
            Text(inert(",".join(f"{k}={v}" for k, v in sorted(group.spec.spec.labels.items())))),
        )
    return table


@group_app.command("cancel")
@with_connection
def cancel_group(
    group_id: GroupId,
    connection: Connection,
    reason: Annotated[str, typer.Option(help="Recorded in the group's error.")] = (
        "cancelled from the rollout command line"
    ),
    as_json: AsJson = False,
) -> None:
    """Cancel a group and its running members (a finished group is left as it is)."""
    with connection.errors(), connection.client() as client:
        group = client.cancel_group(group_id, reason)
    _finish(group, as_json)
