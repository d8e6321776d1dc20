"""A trainer's loop on rollout-service, to copy: groups in, training batches out, weights synced.

    python examples/train_loop.py --target 127.0.0.1:50051 --dataset tasks/ \\
        --agent opencode --base-url http://gpu-node:8000/v1 --model Qwen/Qwen3-8B \\
        --group-size 4 --steps 3 --output runs/demo

Each step runs every task of the dataset (a Harbor dataset directory or a JSONL file of
specs) as a group of `--group-size` members, then:

1. gives each member its group-normalised advantage, (r - mean) / (std + eps) over the
   members that count: scored ones with a reward. A member lost to infrastructure (the batch
   retried it and gave up) or without a reward is left out of the statistics and of the
   batch: it says nothing about the policy;
2. fetches each member trained on (FULL view), turns it into training records
   (`rollout_client.export.train`, one per model turn) and writes `<output>/step-NNNN.jsonl`,
   one line per trainable turn that came with token ids and logprobs: `input_ids` (prompt then
   completion), `loss_mask` (aligned with input_ids: 1 on the completion), `logprobs` (one per
   masked token), `advantage`, `policy_version_start`/`_end`;
3. pauses the run's model calls at the proxy, "updates the weights" (here a sleep: no torch),
   sets the policy version to step + 1 and resumes. Every rollout of the run carries the label
   `train.run=<run id>`, which the pause, the version and the resume select; a rollout started
   later begins at the version set, so the next step's turns say which weights sampled them.

Here the steps do not overlap, so the pause holds nothing live; a trainer that keeps rollouts
running while it trains pauses the same way, and the calls in flight finish (or, with
`abort_in_flight`, are retried after the resume) before the update. `<output>/steps.jsonl`
gets a line per step: what ran, what was trained on, what the pause and resume reached.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rollout.v1 import rollout_pb2 as pb
from rollout_client import AsyncRolloutClient
from rollout_client.batch import BatchResult
from rollout_client.export.train import to_train_records
from rollout_client.specfile import SpecOverrides

EPS = 1e-6
RUN_LABEL = "train.run"


def group_advantages(results: Iterable[BatchResult], eps: float = EPS) -> dict[str, float]:
    """Rollout id -> (r - mean) / (std + eps) within its group, over the members that count
    (scored, with a reward); the others get none, so they are not trained on."""
    groups: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for result in results:
        if result.scored and result.reward is not None:
            groups[result.group or result.rollout_id].append((result.rollout_id, result.reward))
    advantages: dict[str, float] = {}
    for members in groups.values():
        rewards = [reward for _, reward in members]
        mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
        for rollout_id, reward in members:
            advantages[rollout_id] = (reward - mean) / (std + eps)
    return advantages


def training_lines(rollout: pb.Rollout, task: str, advantage: float) -> Iterator[dict[str, Any]]:
    """The rollout's trainable turns that came with token ids and logprobs, as batch lines."""
    for record in to_train_records(rollout):
        if not (record["trainable"] and record["token_ids_present"] and record["logprobs_present"]):
            continue
        yield {
            "task": task,
            "rollout_id": record["rollout_id"],
            "group_id": record["group_id"],
            "member_index": record["member_index"],
            "turn_index": record["turn_index"],
            "reward": record["reward"],
            "advantage": advantage,
            "input_ids": record["prompt_token_ids"] + record["completion_token_ids"],
            "loss_mask": record["loss_mask"],
            "logprobs": record["logprobs"],
            "policy_version_start": record["policy_version_start"],
            "policy_version_end": record["policy_version_end"],
        }


async def update_weights(step: int) -> None:
    """Stands in for the optimizer step and the push of new weights to the inference server."""
    await asyncio.sleep(0.1)


async def run_step(
    client: AsyncRolloutClient, args: argparse.Namespace, step: int, labels: dict[str, str]
) -> dict[str, Any]:
    """One step: a batch of groups, its training batch file, and the weight sync."""
    overrides = SpecOverrides(
        agent=args.agent, base_url=args.base_url, model=args.model, api_key=args.api_key
    )
    batch = client.batch(
        args.dataset, group_size=args.group_size, labels=labels, overrides=overrides
    )
    results = [result async for result in batch]  # each member as it finishes
    advantages = group_advantages(results)
    lines = trainable = 0
    with (args.output / f"step-{step:04d}.jsonl").open("w") as out:
        for result in results:
            if result.rollout_id not in advantages:
                continue
            # One FULL rollout (every turn's ids and logprobs) in memory at a time.
            rollout = await client.get(result.rollout_id, view=pb.RESULT_VIEW_FULL)
            trainable += sum(turn.trainable for turn in rollout.result.turns)
            for line in training_lines(rollout, result.task, advantages[result.rollout_id]):
                out.write(json.dumps(line) + "\n")
                lines += 1

    paused = await client.pause_model_calls(labels=labels)
    try:
        await update_weights(step)
        await client.set_policy_version(step + 1, labels=labels)
    finally:
        resumed = await client.resume_model_calls(labels=labels)
    return {
        "step": step,
        "rollouts": len(results),
        "outcomes": dict(Counter(result.outcome for result in results)),
        "trained_rollouts": len(advantages),
        "lines": lines,
        # A server that sends no token ids (llama-cpp-python) leaves nothing to train on.
        "turns_without_tokens": trainable - lines,
        "policy_version": step + 1,
        "paused": {"rollouts": paused.rollouts, "calls_finished": paused.calls_finished,
                   "calls_aborted": paused.calls_aborted},
        "resumed": {"rollouts": resumed.rollouts, "calls_released": resumed.calls_released},
    }  # fmt: skip


async def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.output.mkdir(parents=True, exist_ok=True)
    labels = {RUN_LABEL: args.run_id}
    with (args.output / "steps.jsonl").open("w") as log:
        async with AsyncRolloutClient(args.target) as client:
            for step in range(args.steps):
                summary = json.dumps(await run_step(client, args, step, labels))
                log.write(summary + "\n")
                log.flush()
                print(summary, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--target", default=None, help="host:port ($ROLLOUT_TARGET)")
    parser.add_argument("--dataset", required=True, help="Harbor dataset dir or JSONL of specs")
    parser.add_argument("--group-size", type=int, default=4, help="members per task")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--output", type=Path, required=True, help="where step files go")
    parser.add_argument("--run-id", default=uuid.uuid4().hex[:12], help="the train.run label")
    parser.add_argument("--agent", help="harness set over each task's spec (e.g. opencode)")
    parser.add_argument("--base-url", help="the policy's OpenAI-compatible endpoint")
    parser.add_argument("--model", help="the model name the endpoint serves")
    parser.add_argument("--api-key", help="the endpoint's key")
    args = parser.parse_args(argv)
    for name in ("group_size", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


if __name__ == "__main__":
    asyncio.run(main())
