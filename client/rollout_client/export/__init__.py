"""Rollouts as files other tools load: Harbor's trajectory format and training records.

    atif.to_atif(rollout)              -> one ATIF document (dict, JSON-ready)
    train.to_train_records(rollout)    -> one training record per turn (dicts, JSON-ready)

Both take a `pb.Rollout` in the FULL view (the SLIM view has no turns) and import nothing
of the server, so a trainer can convert rollouts it already holds. `turn_data` holds what
both read off a turn the same way (logprobs as decimals, policy versions).
"""

from __future__ import annotations

__all__: list[str] = []
