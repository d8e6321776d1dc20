"""Dataset runs: every task of a Harbor dataset (or of a JSONL file of specs) as rollouts or
groups, with bounded concurrency, retries of infrastructure failures, resumable output.

    inputs    the input (dataset dir, task dir, JSONL) -> BatchTask list
    runner    the async engine (Batch): concurrency, groups, retries, request ids, Ctrl-C
    results   BatchResult, one line of results.jsonl, and what counts as scored
    output    the output directory: batch.json, results.jsonl, trajectories/, summary.json
    summary   mean reward, pass@k, the printed table
    client    what a batch asks of the server: the calls of AsyncRolloutClient it makes

The library only: `rollout batch` and its live progress line are the command line's
(`rollout_client.batch_command`, `rollout_client.batch_progress`).

From code: `async for result in client.batch("dataset/", group_size=4): ...`
(`AsyncRolloutClient.batch`).
"""

from rollout_client.batch.inputs import BatchTask, read_input, tasks_of_specs
from rollout_client.batch.output import BatchOutput, open_output
from rollout_client.batch.results import BatchResult
from rollout_client.batch.runner import BATCH_LABEL, Batch, BatchOptions, Tally
from rollout_client.batch.summary import pass_at_k, summarize, summary_table

__all__ = [
    "BATCH_LABEL",
    "Batch",
    "BatchOptions",
    "BatchOutput",
    "BatchResult",
    "BatchTask",
    "Tally",
    "open_output",
    "pass_at_k",
    "read_input",
    "summarize",
    "summary_table",
    "tasks_of_specs",
]
