"""What a batch came to: summary.json and the table `rollout batch` prints.

Only scored rollouts (see `results`) count in the mean reward and pass@k; a rollout passes
when its reward is at least `PASS_REWARD`. pass@k is the unbiased estimator of Chen et al.
(2021), 1 - C(n-c, k) / C(n, k) for a task's n scored rollouts of which c passed, given for
k = 1 and k = the group size, per task and averaged over the tasks with n >= k.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from math import comb
from typing import Any

from rich.table import Table

from rollout_client.batch.results import CANCELLED, INFRASTRUCTURE, REJECTED, BatchResult
from rollout_client.render import figure

__all__ = ["PASS_REWARD", "pass_at_k", "summarize", "summary_reasons", "summary_table"]

PASS_REWARD = 1.0


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """The chance that at least one of k of the n samples passed, c of them having passed
    (None when n < k)."""
    if n < k or k < 1:
        return None
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def _ks(group_size: int) -> list[int]:
    return sorted({1, group_size})


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(
    results: Iterable[BatchResult], group_size: int, *, infra_retries: int, wall_time_s: float
) -> dict[str, Any]:
    """summary.json's document."""
    results = list(results)
    by_task: dict[str, list[BatchResult]] = defaultdict(list)
    for result in results:
        by_task[result.task].append(result)
    tasks: dict[str, dict[str, Any]] = {}
    passes: dict[str, list[float]] = {str(k): [] for k in _ks(group_size)}
    for task, members in sorted(by_task.items()):
        scored = [r for r in members if r.scored]
        passed = sum(r.score() >= PASS_REWARD for r in scored)
        estimates = {str(k): pass_at_k(len(scored), passed, k) for k in _ks(group_size)}
        for k, estimate in estimates.items():
            if estimate is not None:
                passes[k].append(estimate)
        tasks[task] = {
            "rollouts": len(members),
            "errors": _reasons(members),
            "scored": len(scored),
            "passed": passed,
            "mean_reward": _mean([r.score() for r in scored]),
            "pass_at_k": estimates,
        }
    overall = {k: _mean(values) for k, values in passes.items()}
    scored = [r for r in results if r.scored]
    return {
        "tasks": len(tasks),
        "rollouts": len(results),
        "scored": len(scored),
        "mean_reward": _mean([r.score() for r in scored]),
        "pass_at_k": overall,
        "infrastructure_failures": sum(r.outcome == INFRASTRUCTURE for r in results),
        "infrastructure_retries": infra_retries,
        "cancelled": sum(r.outcome == CANCELLED for r in results),
        "rejected": sum(r.outcome == REJECTED for r in results),
        "prompt_tokens": sum(r.prompt_tokens for r in results),
        "completion_tokens": sum(r.completion_tokens for r in results),
        "wall_time_s": round(wall_time_s, 3),
        "per_task": tasks,
    }


def _reasons(members: Iterable[BatchResult]) -> dict[str, int]:
    """Why the task's rollouts failed or were rejected: "KIND: message" -> how many."""
    reasons = Counter(f"{r.error_kind}: {r.error}" for r in members if r.error_kind)
    return dict(sorted(reasons.items()))


def summary_reasons(summary: dict[str, Any]) -> list[str]:
    """One line per reason a task's rollouts failed or were rejected, for under the table."""
    return [
        f"{task}: {count} x {reason}"
        for task, row in summary["per_task"].items()
        for reason, count in row.get("errors", {}).items()
    ]


def _shown(value: float | None) -> str:
    return "-" if value is None else figure(value)


def summary_table(summary: dict[str, Any]) -> Table:
    """One row per task (scored/rollouts, mean reward, pass@k), then the batch's row."""
    ks = list(summary["pass_at_k"])
    table = Table(title="batch summary", show_footer=True)
    table.add_column("task", footer="all")
    table.add_column("scored", justify="right", footer=f"{summary['scored']}/{summary['rollouts']}")
    table.add_column("mean reward", justify="right", footer=_shown(summary["mean_reward"]))
    for k in ks:
        table.add_column(f"pass@{k}", justify="right", footer=_shown(summary["pass_at_k"][k]))
    for task, row in summary["per_task"].items():
        cells = [_shown(row["pass_at_k"][k]) for k in ks]
        scored = f"{row['scored']}/{row['rollouts']}"
        table.add_row(task, scored, _shown(row["mean_reward"]), *cells)
    table.caption = (
        f"infrastructure failures {summary['infrastructure_failures']} "
        f"(retried {summary['infrastructure_retries']}), cancelled {summary['cancelled']}, "
        f"rejected {summary['rejected']}; tokens {summary['prompt_tokens']} prompt + "
        f"{summary['completion_tokens']} completion; wall time {figure(summary['wall_time_s'])}s"
    )
    return table
