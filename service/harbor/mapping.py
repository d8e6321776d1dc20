"""A Harbor task directory mapped onto a rollout spec (docs/harbor.md has the table).

    instruction.md            task.instruction (leading canary comment lines dropped)
    environment/Dockerfile    sandbox.image: built by the image store (`harbor.image`)
    tests/                    task.verifier_files at /tests, after the agent
    solution/                 task.solution_files at /solution, for the oracle agent only
    verify                    `bash /tests/test.sh`, /logs/verifier its reward directory
    [agent].timeout_sec       agent_timeout         [verifier].timeout_sec  verify_timeout
    [environment].cpus        resources.cpu_count   .memory_mb              resources.memory_mb
    [environment].storage_mb  resources.disk_mb     .env                    task.env
    [environment].workdir     task.workdir (else the Dockerfile's WORKDIR, else the FROM
                              image's WorkingDir, else /; the spec's task.workdir wins)
    [environment].allow_internet = false            sandbox.network NONE, whatever was asked
      (or .network_mode = "no-network")             (and the verifier's, unless overridden)
    [verifier].network_mode   sandbox.verifier_network: "public" FULL, "no-network" NONE;
                              unset: [environment]'s (allow_internet, true by default:
                              FULL), as Harbor's verify phase; "allowlist" is refused; a
                              caller's verifier_network NONE holds
    [verifier].env            task.verifier_env     [solution].env          task.solution_env

What the caller sets in the spec wins over task.toml (a non-zero resource, a timeout, an
image: then the Dockerfile is not built, and that image's WorkingDir is inherited). Inline
task fields beside a task directory are refused (but `task.reward_key`, which task.toml cannot
say: it picks the reward among a multi-dimensional reward.json's keys, and `task.workdir`,
where the agent starts): one task, one source. `${VAR:-default}` in an env
value is its default (the server's own environment is never read); `${VAR}` without a
default is refused.
"""

from __future__ import annotations

import re
import tomllib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from service.errors import ImageError
from service.harbor.source import FIELD, TaskTree, refuse
from service.images import ImageConfig, final_stage
from service.models import (
    HarborTaskSpec,
    NetworkPolicy,
    RewardSource,
    RolloutSpec,
    SandboxSpec,
    TaskSpec,
    VerifyMode,
)
from service.sandboxes import VERIFIER_DIR

__all__ = [
    "HARBOR_VERIFY",
    "HARBOR_VERIFY_DISPLAY",
    "dockerfile_from",
    "dockerfile_user",
    "dockerfile_workdir",
    "resolve_spec",
    "task_image_name",
    "task_template_name",
]

HARBOR_VERIFY = (
    # Harbor's tests write /logs/verifier: make it the service's fresh verifier directory.
    # Everything the agent started is dead by now; /logs goes whatever it left there.
    f"rm -rf /logs && mkdir -p /logs && ln -s {VERIFIER_DIR} /logs/verifier && bash /tests/test.sh"
)
HARBOR_VERIFY_DISPLAY = "bash /tests/test.sh"
"""The verify step as a Harbor task writes it (tests/test.sh), shown in place of the wrapper."""
_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)
_TEMPLATE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


class _Section(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Agent(_Section):
    timeout_sec: float | None = None


_NetworkMode = Literal["public", "no-network"]
"""Harbor's network modes the service can give (not "allowlist")."""


class _Verifier(_Section):
    timeout_sec: float | None = None
    env: dict[str, str] = Field(default_factory=dict)
    network_mode: _NetworkMode | None = None


class _Solution(_Section):
    env: dict[str, str] = Field(default_factory=dict)


class _Environment(_Section):
    cpus: int | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    allow_internet: bool = True
    network_mode: _NetworkMode | None = None
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None


class _Metadata(_Section):
    """Harbor's free-form `[metadata]`: where a task says how this service verifies it
    (`engine.verification`), which Harbor itself ignores."""

    rollout_verify_mode: VerifyMode | None = None
    rollout_carried_paths: tuple[str, ...] = ()


class HarborConfig(_Section):
    """The parts of task.toml the service maps; other keys are ignored."""

    metadata: _Metadata = Field(default_factory=_Metadata)
    agent: _Agent = Field(default_factory=_Agent)
    verifier: _Verifier = Field(default_factory=_Verifier)
    solution: _Solution = Field(default_factory=_Solution)
    environment: _Environment = Field(default_factory=_Environment)


def task_image_name(digest: str) -> str:
    """The image a task's Dockerfile is built as: named by the task's content."""
    return f"harbor/task:{digest[:24]}"


def task_template_name(digest: str) -> str:
    """The E2B template a task's Dockerfile is built as (backend e2b): named by its content."""
    return f"harbor-task-{digest[:24]}"


def resolve_spec(
    spec: RolloutSpec, tree: TaskTree, digest: str, image: ImageConfig | None = None
) -> RolloutSpec:
    """`spec` with its task, sandbox and timeouts filled from the task directory `tree`;
    `image` is the config of the image the task's starts from (its FROM, or the spec's)."""
    assert spec.harbor_task is not None
    allowed = TaskSpec(
        instruction="",
        reward_key=spec.task.reward_key,
        workdir=spec.task.workdir,
        verify_mode=spec.task.verify_mode,
        carried_paths=spec.task.carried_paths,
    )
    if spec.task != allowed:
        raise refuse("spec.task", "give inline task fields or harbor_task, not both")
    config = _config(tree)
    dockerfile = _text(tree, "environment/Dockerfile") if not spec.sandbox.image else ""
    _text(tree, "tests/test.sh")
    env = config.environment
    inherited = (image or ImageConfig()).workdir
    built = dockerfile_workdir(dockerfile, inherited) if dockerfile else inherited
    workdir = spec.task.workdir or env.workdir or built or "/"
    tests = _under(tree, "tests/")
    solution = _under(tree, "solution/")
    modes = {f"/tests/{p}": tree[f"tests/{p}"].mode for p in tests} | {
        p: tree[f"solution/{p}"].mode for p in solution
    }
    task = TaskSpec(
        instruction=_instruction(_text(tree, "instruction.md")),
        verify=(HARBOR_VERIFY,),
        verify_display=(HARBOR_VERIFY_DISPLAY,),
        verifier_files={f"/tests/{p}": data for p, data in tests.items()},
        solution_files=solution,
        file_modes={key: f"{mode:o}" for key, mode in modes.items() if mode != 0o644},
        reward_source=RewardSource.FILE,
        reward_key=spec.task.reward_key,
        env=_env(env.env, "[environment].env"),
        verifier_env=_env(config.verifier.env, "[verifier].env"),
        solution_env=_env(config.solution.env, "[solution].env"),
        workdir=workdir.rstrip("/") or "/",
        verify_mode=_verify_mode(spec.task.verify_mode, config.metadata.rollout_verify_mode),
        carried_paths=spec.task.carried_paths or config.metadata.rollout_carried_paths,
    )
    return spec.model_copy(
        update={
            "task": task,
            "sandbox": _sandbox(spec, config, digest),
            "agent_timeout_s": spec.agent_timeout_s or config.agent.timeout_sec,
            "verify_timeout_s": spec.verify_timeout_s or config.verifier.timeout_sec,
            "harbor_task": HarborTaskSpec(path=spec.harbor_task.path, digest=digest),
        }
    )


def _verify_mode(asked: VerifyMode, declared: VerifyMode | None) -> VerifyMode:
    """The caller's mode if it chose one, else the task's `[metadata]`, else AUTO."""
    if asked is not VerifyMode.AUTO or declared is None:
        return asked
    return declared


def _sandbox(spec: RolloutSpec, config: HarborConfig, digest: str) -> SandboxSpec:
    sandbox, resources, env = spec.sandbox, spec.sandbox.resources, config.environment
    asked = {"cpu_count": env.cpus, "memory_mb": env.memory_mb, "disk_mb": env.storage_mb}
    filled = {
        name: value for name, value in asked.items() if value and not getattr(resources, name)
    }
    internet = env.allow_internet and env.network_mode != "no-network"
    network = sandbox.network if internet else NetworkPolicy.NONE
    return sandbox.model_copy(
        update={
            "image": sandbox.image or task_image_name(digest),
            "network": network,
            "verifier_network": _verifier_network(sandbox, config.verifier, internet),
            "resources": resources.model_copy(update=filled),
        }
    )


def _verifier_network(sandbox: SandboxSpec, verifier: _Verifier, internet: bool) -> NetworkPolicy:
    """The task's verify-phase network ([verifier].network_mode, else its baseline), never
    more than the caller's `verifier_network` when the caller set one."""
    task_full = verifier.network_mode == "public" if verifier.network_mode else internet
    if not task_full:
        return NetworkPolicy.NONE
    return sandbox.verifier_network or NetworkPolicy.FULL


def _config(tree: TaskTree) -> HarborConfig:
    try:
        return HarborConfig.model_validate(tomllib.loads(_text(tree, "task.toml")))
    except tomllib.TOMLDecodeError as exc:
        raise refuse(FIELD, f"task.toml is not TOML: {exc}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise refuse(FIELD, f"task.toml: {where}: {first['msg']}") from exc


def _text(tree: TaskTree, path: str) -> str:
    if path not in tree:
        raise refuse(FIELD, f"the task directory has no {path}")
    try:
        return tree[path].data.decode()
    except UnicodeDecodeError as exc:
        raise refuse(FIELD, f"{path} is not UTF-8") from exc


def _under(tree: TaskTree, prefix: str) -> dict[str, bytes]:
    return {
        path.removeprefix(prefix): f.data for path, f in tree.items() if path.startswith(prefix)
    }


def _instruction(text: str) -> str:
    lines = text.split("\n")
    start = 0
    while start < len(lines) and _CANARY.match(lines[start].strip()):
        start += 1
    while start < len(lines) and not lines[start].strip():
        start += 1
    return "\n".join(lines[start:])


def _env(values: dict[str, str], section: str) -> dict[str, str]:
    """Templates resolved to their defaults; the server's environment is never read."""

    def default(match: re.Match[str]) -> str:
        if match[2] is None:
            raise refuse(
                FIELD,
                f"task.toml {section}: ${{{match[1]}}} would read the server's environment; "
                "give a default (${VAR:-value}) or set it in the spec",
            )
        return match[2]

    return {name: _TEMPLATE.sub(default, value) for name, value in values.items()}


def dockerfile_workdir(dockerfile: str, inherited: str = "") -> str:
    """The last stage's working directory as its WORKDIR lines set it on top of `inherited`
    (its FROM image's), through the stages it builds on ("" if none set one)."""
    workdir = inherited
    for instruction, operand in _final_steps(dockerfile):
        if instruction == "WORKDIR" and operand:
            path = operand.strip().strip('"')
            workdir = path if path.startswith("/") else f"{workdir.rstrip('/')}/{path}"
    return workdir


def dockerfile_user(dockerfile: str, inherited: str = "") -> str:
    """The user the last stage's image runs as: its last USER line, else `inherited`."""
    users = [operand.strip() for step, operand in _final_steps(dockerfile) if step == "USER"]
    return users[-1] if users else inherited


def dockerfile_from(dockerfile: str) -> str | None:
    """The image the last stage starts from, through the stages it builds on (None: scratch)."""
    return _final_stage(dockerfile)[0]


def _final_steps(dockerfile: str) -> list[tuple[str, str]]:
    return _final_stage(dockerfile)[1]


def _final_stage(dockerfile: str) -> tuple[str | None, list[tuple[str, str]]]:
    try:
        return final_stage(dockerfile, {}, image="environment/Dockerfile")
    except ImageError as exc:
        raise refuse(FIELD, f"environment/Dockerfile: {exc.detail}") from exc
