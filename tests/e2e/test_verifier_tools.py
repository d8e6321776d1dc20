"""Through the real server on the Debian base image, where the agent is root: what the
verifier executes cannot be the agent's (`engine.verification`). FRESH, the default, runs
setup's programs in a new sandbox, so each cheat below is simply scored; IN_PLACE refuses
it (`verifier.integrity`), and there installing what a solution needs still scores.

Each cheat below scored before the check: 1.0 for a verify of `false`, 0.5 -> 1.0 for
`true; false`.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.config import Settings
from service.images import ImageStore
from testing.specs import command_spec
from tests.e2e.cheats import notices

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="image sandboxes need a root server"),
]
_IMAGE = {"image": "rollout/base"}
_IN_PLACE = {"verifyMode": "VERIFY_MODE_IN_PLACE"}
_FORGE = "mkdir -p /home/user/logs/verifier; echo 1 > /home/user/logs/verifier/reward.txt"
_WRAP_BASH = (
    "cp /usr/bin/bash /usr/local/lib/real-bash && "
    'printf \'#!/usr/local/lib/real-bash\\n/usr/local/lib/real-bash "$@"; s=$?; '
    f"{_FORGE}; exit $s\\n' > /tmp/wrapper && chmod 755 /tmp/wrapper && "
    "mv /tmp/wrapper /usr/bin/bash"
)
_PTH_HOOK = (
    "echo \"import os; os.makedirs('/home/user/logs/verifier', exist_ok=True); "
    "open('/home/user/logs/verifier/reward.txt', 'w').write('1')\" "
    "> /usr/lib/python3/dist-packages/zz_hook.pth"
)
_SHADOW_PYTHON = (
    "printf '#!/usr/local/lib/real-bash\\n" + _FORGE.replace(";", ";") + "\\n' "
    "> /usr/local/bin/python3 && chmod 755 /usr/local/bin/python3 && "
    "cp /usr/bin/bash /usr/local/lib/real-bash"
)


@pytest.fixture(scope="module", autouse=True)
def base_image() -> None:
    """The Debian base of the server's shared cache (a hit once built on this machine)."""
    asyncio.run(ImageStore(Settings().cache_dir).base())


async def _run(stub: pb_grpc.RolloutServiceAsyncStub, spec: pb.RolloutSpec) -> pb.Rollout:
    response = await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    return response.rollout


_CHEATS = {
    "bash wrapped to write the reward": (_WRAP_BASH, ("false",), "/usr/bin/bash"),
    "false replaced by true": (
        "cp /usr/bin/true /tmp/t && mv /tmp/t /usr/bin/false",
        ("true", "false"),
        "/usr/bin/false",
    ),
    "a Python start-up hook": (_PTH_HOOK, ("python3 -c 'raise SystemExit(1)'",), "zz_hook.pth"),
    "python3 shadowed on PATH": (_SHADOW_PYTHON, ("python3 -c 'raise SystemExit(1)'",), "hides"),
    "the loader told to preload": (
        "cp /usr/lib/x86_64-linux-gnu/libutil.so.1 /usr/local/lib/x.so && "
        "echo /usr/local/lib/x.so > /etc/ld.so.preload",
        ("false",),
        "/etc/ld.so.preload",
    ),
}


@pytest.mark.parametrize("cheat", list(_CHEATS), ids=list(_CHEATS))
async def test_a_fresh_verifier_runs_none_of_the_cheats(
    stub: pb_grpc.RolloutServiceAsyncStub, cheat: str
) -> None:
    command, verify, _ = _CHEATS[cheat]
    rollout = await _run(stub, command_spec(command, verify=verify, sandbox=_IMAGE))

    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result
    assert rollout.result.reward < 1.0  # the honest score: the cheated command failed
    assert [r.exit_code for r in rollout.result.verify_results][-1] != 0
    assert "carried" in (await notices(stub, rollout.id))["verifier.fresh"]


@pytest.mark.parametrize("cheat", list(_CHEATS), ids=list(_CHEATS))
async def test_an_agent_that_changed_what_the_verifier_runs_in_place_is_never_scored(
    stub: pb_grpc.RolloutServiceAsyncStub, cheat: str
) -> None:
    command, verify, named = _CHEATS[cheat]
    spec = command_spec(command, verify=verify, sandbox=_IMAGE, task=_IN_PLACE)
    rollout = await _run(stub, spec)

    assert rollout.status == pb.ROLLOUT_STATUS_FAILED, rollout.result
    assert rollout.result.error.kind == pb.ERROR_KIND_TAMPERED
    assert named in rollout.result.error.message
    assert rollout.result.reward == 0.0
    assert list(rollout.result.verify_results) == []  # the verifier never ran
    assert named in (await notices(stub, rollout.id))["verifier.tampered"]


async def test_a_program_setup_installed_is_sealed_too(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    install = (
        "printf '#!/bin/sh\\nexit 1\\n' > /usr/local/bin/check && chmod 755 /usr/local/bin/check"
    )
    spec = command_spec(
        "printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/check",
        setup=(install,),
        verify=("check",),
        sandbox=_IMAGE,
        task=_IN_PLACE,
    )
    rollout = await _run(stub, spec)

    assert rollout.result.error.kind == pb.ERROR_KIND_TAMPERED, rollout.result
    assert "/usr/local/bin/check" in rollout.result.error.message


async def test_installing_what_a_solution_needs_still_scores_in_place(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    agent = (
        "mkdir -p /usr/local/lib/python3.11/dist-packages && "
        "echo 'ANSWER = 42' > /usr/local/lib/python3.11/dist-packages/helper_mod.py && "
        "printf '#!/bin/sh\\necho 42\\n' > /usr/local/bin/answer-tool && "
        "chmod 755 /usr/local/bin/answer-tool && "
        "echo configured > /etc/motd && python3 -c 'import json, helper_mod' && "
        "answer-tool > answer.txt && "
        # a bytecode cache planted where the verifier's Python keeps its own
        "mkdir -p /tmp/.rollout-verifier-pycache && touch /tmp/.rollout-verifier-pycache/planted"
    )
    verify = (
        'test "$(answer-tool)" = 42',
        "python3 -c 'import helper_mod; assert helper_mod.ANSWER == 42'",
        "grep -qx 42 answer.txt && grep -qx configured /etc/motd",
        'test "$PYTHONPYCACHEPREFIX" = /tmp/.rollout-verifier-pycache',
        "test -d $PYTHONPYCACHEPREFIX && ! test -e $PYTHONPYCACHEPREFIX/planted",
    )
    spec = command_spec(agent, verify=verify, sandbox=_IMAGE, task=_IN_PLACE)
    rollout = await _run(stub, spec)

    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result
    assert rollout.result.reward == 1.0, [r.stderr for r in rollout.result.verify_results]


async def test_a_workdir_inside_a_system_tree_stays_the_agents(
    stub: pb_grpc.RolloutServiceAsyncStub,
) -> None:
    spec = command_spec(
        "printf '#!/bin/sh\\necho fixed\\n' > run.sh",
        setup=("printf '#!/bin/sh\\necho broken\\n' > run.sh && chmod 755 run.sh",),
        verify=('test "$(./run.sh)" = fixed',),
        sandbox=_IMAGE,
        task={"workdir": "/opt/app"},
    )
    rollout = await _run(stub, spec)

    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result
    assert rollout.result.reward == 1.0


@pytest.mark.parametrize("image", ["host", "rollout/base"])
async def test_a_fresh_verifier_sees_the_agents_workdir_exactly_and_nothing_else(
    stub: pb_grpc.RolloutServiceAsyncStub, image: str
) -> None:
    setup = "echo old > a.txt && echo old > b.txt && echo 'exit 0' > run.sh && chmod 755 run.sh"
    agent = (
        "rm a.txt && echo new > b.txt && chmod 700 run.sh && ln -s b.txt link && mkdir empty "
        "&& echo agent > ~/outside.txt && mkdir -p tests && echo planted > tests/conftest.py"
    )
    verify = (
        "! test -e a.txt && grep -qx new b.txt && test -L link && test -d empty",
        'test "$(stat -c %a run.sh)" = 700 && ./run.sh',
        "! test -e ~/outside.txt",
        "test -f tests/hidden.sh && ! test -e tests/conftest.py",
    )
    spec = command_spec(
        agent,
        setup=(setup,),
        verify=verify,
        sandbox={"image": image},
        task={"verifierFiles": {"tests/hidden.sh": "ZXhpdCAwCg=="}},
    )
    rollout = await _run(stub, spec)

    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result
    assert [r.exit_code for r in rollout.result.verify_results] == [0, 0, 0, 0], [
        r.stderr for r in rollout.result.verify_results
    ]
    assert "fresh" in str(await notices(stub, rollout.id))
    assert "outside.txt" not in rollout.result.files  # collected from the agent's sandbox
    assert rollout.result.files["b.txt"] == b"new\n"
