"""Spec files (YAML, JSON or TOML) and the `rollout run` flags that override them.

A spec file holds a RolloutSpec in the proto JSON shape (see `rollout_client.messages`:
short enum names and numbers of seconds are fine), either bare or under a top-level "spec"
key, as in a RunRolloutRequest. examples/task.yaml shows every field, commented.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from rollout.v1 import rollout_pb2 as pb

from rollout_client.errors import SpecError
from rollout_client.harbor_pack import pack_task_dir
from rollout_client.messages import parse_network, to_spec

__all__ = ["SpecOverrides", "apply_overrides", "build_spec", "load_spec_file", "parse_pairs"]


def _load_toml(text: str) -> Any:
    return tomllib.loads(text)


_LOADERS: dict[str, Callable[[str], Any]] = {
    ".yaml": yaml.safe_load,
    ".yml": yaml.safe_load,
    ".json": json.loads,
    ".toml": _load_toml,
}
_PARSE_ERRORS = (yaml.YAMLError, json.JSONDecodeError, tomllib.TOMLDecodeError)


@dataclass(frozen=True)
class SpecOverrides:
    """Values given as flags; each one that is set replaces the file's value."""

    instruction: str | None = None
    setup: tuple[str, ...] = ()
    verify: tuple[str, ...] = ()
    reward_key: str | None = None
    """The reward.json key that is the reward when it has no "reward" key (`task.reward_key`)."""
    agent: str | None = None
    agent_command: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    agent_timeout_s: float | None = None
    command_timeout_s: float | None = None
    backend: str | None = None
    network: str | None = None
    request_id: str | None = None
    endpoint_kind: str | None = None
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    harbor_task: str | None = None
    """A task directory under the server's task roots."""
    harbor_dir: Path | None = None
    """A local task directory, uploaded as an archive."""
    image: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    """Task environment variables, set over the file's (`task.env`)."""
    files: Mapping[str, bytes] = field(default_factory=dict)
    """Files staged into the workdir, by relative path, over the file's (`task.files`)."""
    file_modes: Mapping[str, str] = field(default_factory=dict)
    """Octal modes of some of `files` (`task.file_modes`)."""
    agent_options: Mapping[str, Any] = field(default_factory=dict)
    """Harness options, set over the file's (`agent.options`)."""


def load_spec_file(path: Path) -> dict[str, Any]:
    """The spec mapping in `path`, chosen by its extension; SpecError says what is wrong."""
    loader = _LOADERS.get(path.suffix.lower())
    if loader is None:
        known = ", ".join(_LOADERS)
        raise SpecError(f"spec file {path}: unknown extension {path.suffix!r} (use {known})")
    try:
        data = loader(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(f"spec file {path}: {exc.strerror or exc}") from exc
    except (*_PARSE_ERRORS, UnicodeDecodeError) as exc:
        reason = " ".join(str(exc).split())
        raise SpecError(f"spec file {path}: not valid {path.suffix[1:].upper()}: {reason}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(f"spec file {path}: expected a mapping, found {type(data).__name__}")
    if set(data) == {"spec"} and isinstance(data["spec"], dict):
        return data["spec"]
    return data


def parse_pairs(items: Iterable[str]) -> dict[str, str]:
    """`KEY=VALUE` strings (labels, env, options) as a mapping; the value may hold "=".
    ValueError names the item without a key."""
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expects KEY=VALUE, got {item!r}")
        pairs[key.strip()] = value
    return pairs


def build_spec(path: Path | None, overrides: SpecOverrides) -> pb.RolloutSpec:
    """The spec in `path` (if any) with `overrides` applied."""
    harbor = overrides.harbor_task is not None or overrides.harbor_dir is not None
    if path is None and overrides.instruction is None and not harbor:
        raise SpecError("give a SPEC_FILE or --instruction (or --harbor-task, --harbor-dir)")
    spec = pb.RolloutSpec()
    if path is not None:
        data = load_spec_file(path)
        try:
            spec = to_spec(data)
        except SpecError as exc:
            raise SpecError(f"spec file {path}: {exc}") from exc
    apply_overrides(spec, overrides)
    return spec


def apply_overrides(spec: pb.RolloutSpec, overrides: SpecOverrides) -> None:
    """Set the values `overrides` gives over `spec` (`rollout batch` applies its flags to
    every spec of a dataset so)."""
    if overrides.instruction is not None:
        spec.task.instruction = overrides.instruction
    if overrides.setup:
        spec.task.ClearField("setup")
        spec.task.setup.extend(overrides.setup)
    if overrides.verify:
        spec.task.ClearField("verify")
        spec.task.verify.extend(overrides.verify)
    if overrides.reward_key is not None:
        spec.task.reward_key = overrides.reward_key
    if overrides.agent is not None:
        spec.agent.name = overrides.agent
    if overrides.agent_command is not None:
        spec.agent.command = overrides.agent_command
        if not spec.agent.name:
            spec.agent.name = "command"
    spec.labels.update(overrides.labels)
    if overrides.agent_timeout_s is not None:
        spec.agent_timeout.FromTimedelta(timedelta(seconds=overrides.agent_timeout_s))
    if overrides.command_timeout_s is not None:
        spec.command_timeout.FromTimedelta(timedelta(seconds=overrides.command_timeout_s))
    if overrides.backend is not None:
        spec.sandbox.backend = overrides.backend
    if overrides.network is not None:
        spec.sandbox.network = parse_network(overrides.network)
    if overrides.request_id is not None:
        spec.request_id = overrides.request_id
    if overrides.harbor_task is not None:
        spec.harbor_task.path = overrides.harbor_task
    if overrides.harbor_dir is not None:
        spec.harbor_task.archive = pack_task_dir(overrides.harbor_dir)
    if overrides.image is not None:
        spec.sandbox.image = overrides.image
    spec.task.env.update(overrides.env)
    spec.task.files.update(overrides.files)
    spec.task.file_modes.update(overrides.file_modes)
    if overrides.agent_options:
        spec.agent.options.update(overrides.agent_options)
    _apply_endpoint(spec.endpoint, overrides)


def _apply_endpoint(endpoint: pb.Endpoint, overrides: SpecOverrides) -> None:
    if overrides.endpoint_kind is not None:
        endpoint.kind = overrides.endpoint_kind
    if overrides.base_url is not None:
        endpoint.base_url = overrides.base_url
    if overrides.model is not None:
        endpoint.model = overrides.model
    if overrides.api_key is not None:
        endpoint.api_key = overrides.api_key
