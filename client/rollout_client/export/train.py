"""A rollout as training records: one per turn, the token data a trainer feeds its loss.

Each record is a flat JSON object (a line of JSONL), the same keys for every turn:

| key                        | what                                                          |
| -------------------------- | ------------------------------------------------------------- |
| rollout_id, turn_index     | where it came from                                            |
| group_id, member_index     | the group it belongs to ("" and 0 for a lone rollout)         |
| reward                     | the rollout's reward (null when it has none, which is not 0)  |
| trainable                  | false for auxiliary calls (e.g. opencode's title generation)  |
| prompt_token_ids           | the prompt exactly as the upstream tokenized it               |
| completion_token_ids       | the completion exactly as the upstream returned it            |
| logprobs                   | one per completion token the upstream scored (see below)      |
| loss_mask                  | aligned with prompt_token_ids + completion_token_ids: 0 on    |
|                            | the prompt, 1 on the completion of a trainable turn, else 0   |
| policy_version_start / end | the policy version (SetPolicyVersion) when the call went      |
|                            | upstream / ended (null: none was set for the rollout)         |
| upstream_weight_version    | the weight version the upstream's response header named ("") |
| token_ids_present          | false when the upstream returned no ids (the lists are empty) |
| logprobs_present           | false when some output came without a logprob (then logprobs  |
|                            | is shorter than completion_token_ids)                         |
| finish_reason, incomplete  | how the completion ended; incomplete turns were cut short     |

Ids and logprobs are never invented or re-tokenized: a turn without them has empty lists.
"""

from __future__ import annotations

from typing import Any

from rollout.v1 import rollout_pb2 as pb

from rollout_client.export.turn_data import completion_logprobs, policy_versions
from rollout_client.results import reward_of

__all__ = ["to_train_records"]


def to_train_records(rollout: pb.Rollout) -> list[dict[str, Any]]:
    """One training record per turn, in turn order; needs the FULL view's turns."""
    return [_record(rollout, turn) for turn in rollout.result.turns]


def _record(rollout: pb.Rollout, turn: pb.Turn) -> dict[str, Any]:
    prompt = list(turn.prompt_token_ids)
    completion = list(turn.completion_token_ids)
    versions = policy_versions(turn)
    return {
        "rollout_id": rollout.id,
        "turn_index": turn.index,
        "group_id": rollout.group_id,
        "member_index": rollout.member_index,
        "reward": reward_of(rollout),
        "trainable": turn.trainable,
        "prompt_token_ids": prompt,
        "completion_token_ids": completion,
        "logprobs": completion_logprobs(turn),
        "loss_mask": [0] * len(prompt) + [int(turn.trainable)] * len(completion),
        "policy_version_start": versions.get("policy_version_start"),
        "policy_version_end": versions.get("policy_version_end"),
        "upstream_weight_version": turn.upstream_weight_version,
        "token_ids_present": turn.token_ids_present,
        "logprobs_present": turn.logprobs_present,
        "finish_reason": turn.finish_reason,
        "incomplete": turn.incomplete,
    }
