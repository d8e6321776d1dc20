"""`rollout list`'s table at 80 columns whatever phase a running rollout is in: the longest
phase name (CREATING_SANDBOX) once squeezed the labels to six columns."""

from __future__ import annotations

import pytest
from rich.console import Console
from rollout.v1 import rollout_pb2 as pb
from rollout_client.render import rollouts_table

_LABEL = "a label value long enough to need folding"


_PHASES = [pb.Phase.Name(number) for number in pb.Phase.values() if number]


@pytest.mark.parametrize("phase", _PHASES)
def test_every_phase_leaves_the_labels_room_to_fold_at_words(phase: str) -> None:
    running = pb.Rollout(id="a" * 32, status=pb.ROLLOUT_STATUS_RUNNING, phase=phase)
    done = pb.Rollout(id="b" * 32, status=pb.ROLLOUT_STATUS_SUCCEEDED)
    for rollout in (running, done):
        rollout.spec.task_id = "task-with-a-long-id"
        rollout.spec.labels["note"] = _LABEL
    console = Console(width=80, record=True)
    console.print(rollouts_table([running, done]))
    lines = console.export_text().splitlines()

    assert max(len(line) for line in lines) <= 80
    assert sum(line.rstrip().endswith("folding") for line in lines) == 2, "\n".join(lines)
