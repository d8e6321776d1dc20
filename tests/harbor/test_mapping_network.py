"""A Harbor task's verify-phase network: [verifier].network_mode, else the [environment]
baseline (allow_internet, true by default), as Harbor's verify phase has it; the caller's
`verifier_network` can only narrow it."""

from __future__ import annotations

import pytest

from service.errors import SpecError
from service.harbor.mapping import resolve_spec
from service.harbor.source import TaskFile, TaskTree, tree_digest
from service.models import HarborTaskSpec, NetworkPolicy, RolloutSpec, SandboxSpec, TaskSpec

NONE, FULL = NetworkPolicy.NONE, NetworkPolicy.FULL


def _tree(task_toml: str) -> TaskTree:
    files = {
        "instruction.md": "Do it.\n",
        "task.toml": task_toml,
        "environment/Dockerfile": "FROM rollout/base\n",
        "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    }
    return {path: TaskFile(text.encode(), 0o644) for path, text in files.items()}


def _resolved(task_toml: str, sandbox: SandboxSpec | None = None) -> SandboxSpec:
    spec = RolloutSpec(
        task=TaskSpec(instruction=""),
        harbor_task=HarborTaskSpec(path="t"),
        sandbox=sandbox or SandboxSpec(),
    )
    tree = _tree(task_toml)
    return resolve_spec(spec, tree, tree_digest(tree)).sandbox


@pytest.mark.parametrize(
    ("task_toml", "verifier"),
    [
        ("", FULL),  # allow_internet defaults to true
        ("[environment]\nallow_internet = true\n", FULL),
        ("[environment]\nallow_internet = false\n", NONE),
        ('[environment]\nnetwork_mode = "no-network"\n', NONE),
        ('[verifier]\nnetwork_mode = "no-network"\n', NONE),  # the phase overrides
        ('[environment]\nallow_internet = false\n[verifier]\nnetwork_mode = "public"\n', FULL),
    ],
)
def test_the_verifier_follows_the_task(task_toml: str, verifier: NetworkPolicy) -> None:
    sandbox = _resolved(task_toml)
    assert sandbox.verifier_network is verifier
    assert sandbox.network is NONE  # the agent's stays the caller's (NONE by default)


def test_the_caller_narrows_the_verifier_never_widens_it() -> None:
    assert _resolved("", SandboxSpec(verifier_network=NONE)).verifier_network is NONE
    denied = "[environment]\nallow_internet = false\n"
    assert _resolved(denied, SandboxSpec(verifier_network=FULL)).verifier_network is NONE


def test_an_allowlist_is_refused_naming_it() -> None:
    with pytest.raises(SpecError) as error:
        _resolved('[verifier]\nnetwork_mode = "allowlist"\n')
    assert "verifier.network_mode" in str(error.value)
