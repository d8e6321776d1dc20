"""examples/task.yaml, the one complete spec file: it loads, and it names every field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import cast

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor
from rollout.v1 import rollout_pb2 as pb
from rollout_client.specfile import SpecOverrides, build_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "task.yaml"


def _field_names(message: Descriptor) -> set[str]:
    """Every field name of `message` and of the rollout.v1 messages inside it (no maps)."""
    names = set()
    for field in message.fields:
        names.add(field.name)
        inner = field.message_type
        if inner is None or not inner.full_name.startswith("rollout.v1."):
            continue
        if not inner.GetOptions().map_entry:
            names |= _field_names(inner)
    return names


def test_the_example_loads_as_the_spec_it_describes() -> None:
    spec = build_spec(EXAMPLE, SpecOverrides())

    assert spec.agent.name == "opencode"
    assert spec.endpoint.kind == "vllm"
    assert spec.sandbox.network == pb.NETWORK_POLICY_NONE
    assert spec.capture.mode == pb.CAPTURE_MODE_TRANSPARENT_PROXY
    assert spec.agent_timeout.seconds == 300
    assert spec.command_timeout.seconds == 60
    assert spec.task.verifier_files["test_hello.sh"].startswith(b"grep -qx")
    assert json_format.MessageToDict(spec.agent.options) == {
        "disabled_tools": ["webfetch", "question"]
    }


def test_the_example_shows_every_field_of_the_spec() -> None:
    # Set or commented out: a field missing here is a field a reader cannot find.
    text = EXAMPLE.read_text()
    written = set(re.findall(r"^\s*#?\s*(\w+):", text, re.MULTILINE))

    missing = _field_names(cast(Descriptor, pb.RolloutSpec.DESCRIPTOR)) - written
    assert not missing, f"examples/task.yaml does not show: {sorted(missing)}"
