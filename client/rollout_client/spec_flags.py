"""The flags that write a spec, shared by `rollout run` and `rollout group run`.

Each one given replaces the spec file's value (--setup and --verify replace its lists;
--env, --file, --agent-option and --label are set over its maps, key by key). A bad value is
a usage error naming its flag.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from rollout_client.flag_groups import with_flags
from rollout_client.messages import AGENT_NAMES, parse_network
from rollout_client.options import LabelFlags
from rollout_client.specfile import SpecOverrides, parse_pairs

__all__ = [
    "labels_of",
    "need_a_task",
    "spec_flags",
    "with_dataset_spec_flags",
    "with_spec_flags",
]

_TASK = "Task"
_AGENT = "Agent"
_ENDPOINT = "Endpoint (the model the agent calls)"
_SANDBOX = "Sandbox"


def _bad(flag: str, message: str) -> NoReturn:
    raise typer.BadParameter(message, param_hint=flag)


def _network(value: str | None) -> str | None:
    if value is not None:
        try:
            parse_network(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from exc
    return value


def _pairs(flag: str, items: list[str] | None) -> dict[str, str]:
    try:
        return parse_pairs(items or ())
    except ValueError as exc:
        _bad(flag, str(exc))


def labels_of(flags: list[str] | None) -> dict[str, str]:
    """`--label KEY=VALUE` flags as a mapping; a bad one is a usage error."""
    return _pairs("--label", flags)


def _api_key(variable: str | None) -> str | None:
    """The value of the environment variable named by --api-key-env (never a key in argv);
    set but empty means no key, unset is a mistake (a misspelt name, say)."""
    if variable is None:
        return None
    value = os.environ.get(variable)
    if value is None:
        _bad("--api-key-env", f"the environment variable {variable} is not set")
    return value


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _option_values(items: list[str] | None) -> dict[str, Any]:
    """`--agent-option KEY=VALUE`: a VALUE that is JSON (5, true, ["bash"]) is taken as
    such, anything else as text; NaN and Infinity are text, as the server takes no such number."""
    values: dict[str, Any] = {}
    for key, text in _pairs("--agent-option", items).items():
        try:
            values[key] = json.loads(text, parse_constant=_no_constant)
        except ValueError:
            values[key] = text
    return values


def _staged_files(items: list[str] | None) -> tuple[dict[str, bytes], dict[str, str]]:
    """`--file LOCAL[:REMOTE]`: each local file's bytes under REMOTE (a path relative to the
    workdir; default: LOCAL's name), and mode 755 for the executable ones."""
    files: dict[str, bytes] = {}
    modes: dict[str, str] = {}
    for item in items or ():
        local, sep, remote = item.partition(":")
        path = Path(local)
        remote = remote if sep else path.name
        if not local or not remote:
            _bad("--file", f"expects LOCAL[:REMOTE], got {item!r}")
        try:
            files[remote] = path.read_bytes()
            executable = path.stat().st_mode & 0o111
        except OSError as exc:
            _bad("--file", f"cannot read {local!r}: {exc.strerror or exc}")
        if executable:
            modes[remote] = "755"
    return files, modes


def spec_flags(
    instruction: Annotated[
        str | None, typer.Option(help="The task's instruction.", rich_help_panel=_TASK)
    ] = None,
    setup: Annotated[
        list[str] | None,
        typer.Option("--setup", help="A setup command (repeatable).", rich_help_panel=_TASK),
    ] = None,
    verify: Annotated[
        list[str] | None,
        typer.Option("--verify", help="A verify command (repeatable).", rich_help_panel=_TASK),
    ] = None,
    reward_key: Annotated[
        str | None,
        typer.Option(
            metavar="KEY",
            help='The reward.json key that is the reward when it has no "reward" key.',
            rich_help_panel=_TASK,
        ),
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env",
            metavar="KEY=VALUE",
            help="A task environment variable: setup, agent and verifier (repeatable).",
            rich_help_panel=_TASK,
        ),
    ] = None,
    file: Annotated[
        list[str] | None,
        typer.Option(
            "--file",
            metavar="LOCAL[:REMOTE]",
            help="Stage a local file into the workdir, as REMOTE (default: its name) (repeatable).",
            rich_help_panel=_TASK,
        ),
    ] = None,
    harbor_task: Annotated[
        str | None,
        typer.Option(
            help="A Harbor task directory under the server's task roots (root/task).",
            rich_help_panel=_TASK,
        ),
    ] = None,
    harbor_dir: Annotated[
        Path | None,
        typer.Option(
            help="A local Harbor task directory, uploaded as a .tar.gz.", rich_help_panel=_TASK
        ),
    ] = None,
    command_timeout: Annotated[
        float | None,
        typer.Option(
            help="Each setup/verify command's budget, in seconds.", min=0, rich_help_panel=_TASK
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(help=f"The agent: {', '.join(AGENT_NAMES)}.", rich_help_panel=_AGENT),
    ] = None,
    agent_command: Annotated[
        str | None,
        typer.Option(help='The shell command of the "command" agent.', rich_help_panel=_AGENT),
    ] = None,
    agent_option: Annotated[
        list[str] | None,
        typer.Option(
            "--agent-option",
            metavar="KEY=VALUE",
            help='A harness option; a JSON VALUE (5, true, ["bash"]) as such (repeatable).',
            rich_help_panel=_AGENT,
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(help="The agent's time budget, in seconds.", min=0, rich_help_panel=_AGENT),
    ] = None,
    endpoint_kind: Annotated[
        str | None,
        typer.Option(
            help="Endpoint shorthand: vllm, openai or hf_router (server-side env).",
            rich_help_panel=_ENDPOINT,
        ),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            help="The model endpoint's OpenAI-compatible base URL.", rich_help_panel=_ENDPOINT
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="The model to ask the endpoint for.", rich_help_panel=_ENDPOINT),
    ] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="Send the endpoint key held in the environment variable NAME.",
            rich_help_panel=_ENDPOINT,
        ),
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(help='Sandbox backend: "local" or "e2b".', rich_help_panel=_SANDBOX),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            help="The image a local sandbox runs on (a name of the server's image store).",
            rich_help_panel=_SANDBOX,
        ),
    ] = None,
    network: Annotated[
        str | None,
        typer.Option(
            help="Sandbox network: NONE (the proxy only) or FULL.",
            callback=_network,
            rich_help_panel=_SANDBOX,
        ),
    ] = None,
    label: LabelFlags = None,
    request_id: Annotated[str | None, typer.Option(help="Idempotency key.")] = None,
) -> SpecOverrides:
    """The spec values these flags give."""
    files, file_modes = _staged_files(file)
    return SpecOverrides(
        instruction=instruction,
        setup=tuple(setup or ()),
        verify=tuple(verify or ()),
        reward_key=reward_key,
        agent=agent,
        agent_command=agent_command,
        labels=labels_of(label),
        agent_timeout_s=timeout,
        command_timeout_s=command_timeout,
        backend=backend,
        network=network,
        request_id=request_id,
        endpoint_kind=endpoint_kind,
        base_url=base_url,
        model=model,
        api_key=_api_key(api_key_env),
        harbor_task=harbor_task,
        harbor_dir=harbor_dir,
        image=image,
        env=_pairs("--env", env),
        files=files,
        file_modes=file_modes,
        agent_options=_option_values(agent_option),
    )


def need_a_task(spec_file: Path | None, overrides: SpecOverrides) -> None:
    """A usage error (exit 2) when neither a spec file nor a flag says what the task is."""
    given = (overrides.instruction, overrides.harbor_task, overrides.harbor_dir)
    if spec_file is None and all(value is None for value in given):
        raise typer.BadParameter(
            "give a SPEC_FILE or --instruction (or --harbor-task, --harbor-dir)",
            param_hint="SPEC_FILE",
        )


with_spec_flags = with_flags(spec_flags, into="overrides")
"""Gives a command the spec flags, as an `overrides: SpecOverrides` argument."""

with_dataset_spec_flags = with_flags(
    spec_flags,
    into="overrides",
    leave_out=frozenset({"instruction", "harbor_task", "harbor_dir", "request_id"}),
)
"""The spec flags but those that name a task (`rollout batch`: its INPUT names the tasks, and
the batch their request ids)."""
