"""A Harbor task directory mapped onto a spec: Harbor's fields, and the caller's winning."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.errors import SpecError
from service.harbor.mapping import (
    HARBOR_VERIFY,
    dockerfile_user,
    dockerfile_workdir,
    resolve_spec,
)
from service.harbor.source import TaskFile, TaskTree, read_rooted, tree_digest
from service.images import ImageConfig
from service.models import (
    HarborTaskSpec,
    NetworkPolicy,
    Resources,
    RewardSource,
    RolloutSpec,
    SandboxSpec,
    TaskSpec,
)

TASKS = Path(__file__).parent / "tasks"


def _spec(**fields: object) -> RolloutSpec:
    base: dict[str, object] = {
        "task": TaskSpec(instruction=""),
        "harbor_task": HarborTaskSpec(path="pytest_task"),
    }
    return RolloutSpec.model_validate(base | fields)


def _resolved(name: str, spec: RolloutSpec | None = None) -> RolloutSpec:
    tree = read_rooted(name, [TASKS], 1 << 20)
    return resolve_spec(spec or _spec(), tree, tree_digest(tree))


def test_every_mapped_field_of_task_toml() -> None:
    spec = _resolved("pytest_task")
    task = spec.task
    assert task.instruction.startswith("Write a Python module")  # canary line dropped
    assert task.verify == (HARBOR_VERIFY,)
    assert task.reward_source is RewardSource.FILE
    assert set(task.verifier_files) == {"/tests/test.sh", "/tests/test_wordcount.py"}
    assert set(task.solution_files) == {"solve.sh"}
    assert task.file_modes == {"/tests/test.sh": "755", "solve.sh": "755"}
    assert task.env == {"WORDCOUNT_LOCALE": "C"}  # ${VAR:-default} is its default
    assert task.verifier_env == {"PYTHONDONTWRITEBYTECODE": "1"}
    assert task.workdir == "/app"  # the Dockerfile's WORKDIR
    assert (spec.agent_timeout_s, spec.verify_timeout_s) == (120.0, 300.0)
    assert spec.sandbox.resources.memory_mb == 1024
    assert spec.sandbox.network is NetworkPolicy.NONE
    assert spec.sandbox.image.startswith("harbor/task:")
    assert spec.harbor_task is not None
    assert len(spec.harbor_task.digest) == 64


def test_workdir_and_solution_env_from_task_toml() -> None:
    task = _resolved("multi_reward").task
    assert task.workdir == "/work"
    assert task.solution_env == {"REPORT_WORD": "done"}


def test_what_the_caller_sets_wins() -> None:
    caller = _spec(
        agent_timeout_s=30.0,
        verify_timeout_s=40.0,
        sandbox=SandboxSpec(
            image="rollout/base",
            network=NetworkPolicy.FULL,
            resources=Resources(memory_mb=512),
        ),
    )
    spec = _resolved("pytest_task", caller)
    assert (spec.agent_timeout_s, spec.verify_timeout_s) == (30.0, 40.0)
    assert spec.sandbox.image == "rollout/base"  # the Dockerfile is not built then
    assert spec.sandbox.resources.memory_mb == 512
    # allow_internet = false is the task's own floor: the stricter one holds
    assert spec.sandbox.network is NetworkPolicy.NONE


def test_allowed_internet_is_granted_only_when_asked() -> None:
    assert _resolved("multi_reward").sandbox.network is NetworkPolicy.NONE
    asked = _spec(sandbox=SandboxSpec(network=NetworkPolicy.FULL))
    assert _resolved("multi_reward", asked).sandbox.network is NetworkPolicy.FULL


def test_inline_task_fields_beside_a_directory_are_refused() -> None:
    with pytest.raises(SpecError) as error:
        _resolved("multi_reward", _spec(task=TaskSpec(instruction="mine")))
    assert [v.field for v in error.value.violations] == ["spec.task"]
    keyed = _resolved("multi_reward", _spec(task=TaskSpec(instruction="", reward_key="passed")))
    assert keyed.task.reward_key == "passed"


def _tree(**files: str) -> TaskTree:
    minimal = {
        "instruction.md": "x",
        "task.toml": "",
        "environment/Dockerfile": "FROM rollout/base\n",
        "tests/test.sh": "true",
    }
    return {path: TaskFile(text.encode(), 0o644) for path, text in (minimal | files).items()}


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"task.toml": "[agent\n"}, "task.toml is not TOML"),
        ({"task.toml": "[agent]\ntimeout_sec = 'soon'\n"}, "task.toml: agent.timeout_sec"),
        ({"task.toml": "[environment]\nenv = { K = '${SECRET}' }\n"}, "${SECRET} would read"),
        ({"instruction.md": None}, "no instruction.md"),
        ({"tests/test.sh": None}, "no tests/test.sh"),
        ({"environment/Dockerfile": None}, "no environment/Dockerfile"),
        ({"environment/Dockerfile": "RUN true\n"}, "environment/Dockerfile: the Dockerfile has no"),
    ],
)
def test_a_bad_task_directory_is_named(files: dict[str, str | None], message: str) -> None:
    tree = _tree(**{k: v for k, v in files.items() if v is not None})
    for path in (k for k, v in files.items() if v is None):
        del tree[path]
    with pytest.raises(SpecError) as error:
        resolve_spec(_spec(), tree, tree_digest(tree))
    (violation,) = error.value.violations
    assert violation.field == "spec.harbor_task"
    assert message in violation.description


def test_dockerfile_workdir() -> None:
    assert dockerfile_workdir("FROM a\nWORKDIR /x\nWORKDIR y\n") == "/x/y"
    assert dockerfile_workdir("FROM a\nWORKDIR /x\nFROM c\nWORKDIR z\n") == "/z"
    assert dockerfile_workdir("FROM a\n") == ""
    # On top of the FROM image's, through the stages the last builds on.
    assert dockerfile_workdir("FROM a\n", "/app") == "/app"
    assert dockerfile_workdir("FROM a\nWORKDIR sub\n", "/app") == "/app/sub"
    assert dockerfile_workdir("FROM a AS b\nWORKDIR /x\nFROM c\nFROM b\n", "/app") == "/x"


def test_dockerfile_user_is_the_last_stages() -> None:
    assert dockerfile_user("FROM a\nUSER u\nFROM b\n", "img") == "img"
    assert dockerfile_user("FROM a AS s\nUSER u\nFROM s\n", "img") == "u"
    assert dockerfile_user("FROM a\nUSER u\nUSER root\n") == "root"


def test_the_from_images_workdir_is_inherited_and_the_caller_may_set_it() -> None:
    """The workdir came from task.toml, else the Dockerfile, else /: never the FROM image's,
    and a caller's task.workdir beside harbor_task was refused."""
    app = ImageConfig(workdir="/app")

    def workdir(spec: RolloutSpec, **files: str) -> str:
        tree = _tree(**files)
        return resolve_spec(spec, tree, tree_digest(tree), app).task.workdir

    assert workdir(_spec()) == "/app"
    assert workdir(_spec(), **{"environment/Dockerfile": "FROM b\nWORKDIR src\n"}) == "/app/src"
    assert workdir(_spec(), **{"task.toml": "[environment]\nworkdir = '/toml'\n"}) == "/toml"
    mine = _spec(task=TaskSpec(instruction="", workdir="/mine"))
    assert workdir(mine, **{"task.toml": "[environment]\nworkdir = '/toml'\n"}) == "/mine"
    # With the caller's image the Dockerfile is not built: that image's workdir holds.
    assert workdir(_spec(sandbox=SandboxSpec(image="x"))) == "/app"
