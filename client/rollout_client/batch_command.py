"""`rollout batch`: every task of a dataset, with a live progress line, then the summary.

Exits 0 when every task has its results (whatever the rewards), 1 on an error (the server
refusing every task, or a setting of its own refusing the dataset's tasks: at once, with what
to set), 2 on bad usage, 130 when interrupted (the rollouts in flight are cancelled first;
--resume finishes).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from rollout_client.batch.output import RESULTS_FILE, SUMMARY_FILE
from rollout_client.batch.runner import BatchOptions, open_batch
from rollout_client.batch.summary import summary_reasons, summary_table
from rollout_client.batch_progress import live_progress
from rollout_client.cli_connection import Connection, with_connection
from rollout_client.exits import EXIT_INTERRUPTED, fail
from rollout_client.inert import inert
from rollout_client.local_server import Local, served
from rollout_client.spec_flags import with_dataset_spec_flags
from rollout_client.specfile import SpecOverrides

__all__ = ["batch"]


@with_connection
@with_dataset_spec_flags
def batch(
    connection: Connection,
    overrides: SpecOverrides,
    source: Annotated[
        Path,
        typer.Argument(
            metavar="INPUT",
            help="A Harbor dataset (a task per subdirectory), a task directory, or a JSONL "
            "file of specs.",
            show_default=False,
        ),
    ],
    output: Annotated[
        Path,
        typer.Option(
            help="Where results.jsonl, trajectories/ and summary.json go.", show_default=False
        ),
    ],
    group_size: Annotated[
        int, typer.Option(help="Rollouts per task, run as one group when more than 1.", min=1)
    ] = 1,
    attempts: Annotated[
        int, typer.Option(help="Runs of a rollout lost to infrastructure, in all.", min=1)
    ] = 3,
    n_concurrent: Annotated[int, typer.Option(help="Rollouts in flight at once.", min=1)] = 8,
    resume: Annotated[
        bool, typer.Option(help="Finish the batch in --output: run what has no result.")
    ] = False,
    local: Local = False,
) -> None:
    """Run every task of a dataset and summarize: mean reward, pass@k, failures, tokens.

    The agent, endpoint and sandbox flags are those of `rollout run`, set over every task's
    spec. Each rollout's line is appended to OUTPUT/results.jsonl as it ends. Ctrl-C cancels
    what is in flight and exits 130; --resume on the same --output runs only the rest.
    With --local, the command starts a server of its own and stops it at the end.
    """
    options = BatchOptions(group_size=group_size, attempts=attempts, n_concurrent=n_concurrent)
    console = Console(soft_wrap=True, highlight=False)
    with served(connection, local) as connection, connection.errors():
        try:
            summary = asyncio.run(_run(connection, source, output, options, resume, overrides))
        except KeyboardInterrupt:
            Console(stderr=True, highlight=False).print(
                f"interrupted: the rollouts in flight were cancelled; "
                f"`rollout batch {source} --output {output} --resume` runs the rest"
            )
            raise typer.Exit(EXIT_INTERRUPTED) from None
    console.print(summary_table(summary))
    for line in summary_reasons(summary):
        console.print(Text(inert(line)))
    console.print(f"results: {output / RESULTS_FILE}, summary: {output / SUMMARY_FILE}")
    if summary["rollouts"] and summary["rejected"] == summary["rollouts"]:
        fail("the server rejected every task of the batch (the reasons are above)")


async def _run(
    connection: Connection,
    source: Path,
    output: Path,
    options: BatchOptions,
    resume: bool,
    overrides: SpecOverrides,
) -> dict[str, Any]:
    stderr = Console(stderr=True, highlight=False)
    async with connection.async_client() as client:
        run = open_batch(
            client, source, options, output_dir=output, resume=resume, overrides=overrides
        )
        if run.finished:
            stderr.print(f"resuming batch {run.batch_id}: {len(run.finished)} results kept")
        with live_progress(run.tally, stderr):
            async with contextlib.aclosing(run.results()) as results:
                async for _ in results:
                    pass
    assert run.final_summary is not None  # set when the results end
    return run.final_summary
