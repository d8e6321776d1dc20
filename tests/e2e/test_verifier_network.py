"""Through the real server: the verifier's network apart from the agent's (issue 22).

Terminal-Bench and Harbor tests fetch their runner at verification; under the agent's
network NONE they all failed. A "public" test host (`testing.fakes.public_host`, a network
namespace behind a veth pair) stands in for the internet: the agent, under NONE, cannot
reach it; the verifier, under FULL, can, and still never a private or host address.
Connections are bash's /dev/tcp: nothing beyond bash in the sandbox.
"""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from service.sandboxes.local.network import host_addresses
from tests.e2e.cheats import notices
from tests.sandboxes.local.test_network import (  # the test host
    Greeter,
    _listener,
    greeter,  # noqa: F401 - a fixture
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="the test host needs root"),
]
_GREETING = "hello from the test host"


def _reaches(address: str, port: int) -> str:
    """A command that succeeds when the greeting at address:port can be read."""
    return f'[ "$(exec 3<>/dev/tcp/{address}/{port} && cat <&3)" = "{_GREETING}" ]'


def _blocked(address: str, port: int) -> str:
    """A command that succeeds when no connection to address:port can be made."""
    return f"! (exec 3<>/dev/tcp/{address}/{port}) 2>/dev/null"


def _agent_probe(target: Greeter) -> str:
    reach = _reaches(target.address, target.port)
    return f"if {reach}; then echo reached; else echo blocked; fi > agent.txt 2>&1"


@pytest.fixture
async def closed_port() -> AsyncIterator[tuple[list[str], int, list[object]]]:
    """A listener on every host address (10.x of the test host included): none may connect."""
    own = [p.split("/")[0] for p in host_addresses(Path("/proc/net/fib_trie").read_text())]
    server, port, accepted = await _listener("0.0.0.0")
    async with server:
        yield [a for a in own if not a.startswith("127.")], port, accepted


async def _run(stub: pb_grpc.RolloutServiceAsyncStub, spec: pb.RolloutSpec) -> pb.Rollout:
    response = await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    rollout: pb.Rollout = response.rollout
    return rollout


def _command_spec(target: Greeter, verify: list[str], **sandbox: Any) -> pb.RolloutSpec:
    return json_format.ParseDict(
        {
            "task": {"instruction": "probe the network", "verify": verify},
            "agent": {"name": "command", "command": _agent_probe(target)},
            "sandbox": sandbox,
        },
        pb.RolloutSpec(),
    )


async def test_the_verifier_under_full_reaches_what_the_agent_under_none_could_not(
    stub: pb_grpc.RolloutServiceAsyncStub,
    greeter: Greeter,  # noqa: F811 - the fixture imported above
    closed_port: tuple[list[str], int, list[object]],
) -> None:
    own, port, accepted = closed_port
    verify = [
        _reaches(greeter.address, greeter.port),
        "grep -qx blocked agent.txt",  # the agent's try, under NONE
        *(_blocked(address, port) for address in [greeter.host.private_address, *own]),
    ]
    spec = _command_spec(greeter, verify, verifierNetwork="NETWORK_POLICY_FULL")
    rollout = await _run(stub, spec)
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
    assert rollout.result.files["agent.txt"].endswith(b"Network is unreachable\nblocked\n")
    results = [(r.command, r.exit_code, r.stderr) for r in rollout.result.verify_results]
    assert rollout.result.reward == 1.0, results
    assert rollout.spec.sandbox.network == pb.NETWORK_POLICY_NONE
    assert rollout.spec.sandbox.verifier_network == pb.NETWORK_POLICY_FULL
    assert accepted == []


async def test_a_daemon_the_agent_left_never_sees_the_verifiers_network(
    stub: pb_grpc.RolloutServiceAsyncStub,
    greeter: Greeter,  # noqa: F811 - the fixture imported above
) -> None:
    """It waits for the network to open, to report home: it is dead by then."""
    reach = _reaches(greeter.address, greeter.port)
    loop = f"until {reach}; do sleep 0.01; done 2>/dev/null; echo reached > daemon.txt"
    daemon = f"( ( setsid bash -c '{loop}' >/dev/null 2>&1 & ) & ); sleep 0.2"
    spec = json_format.ParseDict(
        {
            "task": {"instruction": "leave a daemon", "verify": [reach, "sleep 1"]},
            "agent": {"name": "command", "command": daemon},
            "sandbox": {"verifierNetwork": "NETWORK_POLICY_FULL"},
        },
        pb.RolloutSpec(),
    )
    rollout = await _run(stub, spec)
    assert rollout.result.reward == 1.0, list(rollout.result.verify_results)
    assert "daemon.txt" not in rollout.result.files
    said = await notices(stub, rollout.id)
    assert "verifier.processes_killed" in said
    assert (
        said["verifier.network"] == "the verifier runs with network FULL (the agent ran with NONE)"
    )


async def test_by_default_the_verifier_has_the_agents_network(
    stub: pb_grpc.RolloutServiceAsyncStub,
    greeter: Greeter,  # noqa: F811 - the fixture imported above
) -> None:
    rollout = await _run(stub, _command_spec(greeter, [_reaches(greeter.address, greeter.port)]))
    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error.message
    assert rollout.result.files["agent.txt"].endswith(b"Network is unreachable\nblocked\n")
    assert rollout.result.verify_results[0].exit_code != 0
    assert rollout.result.reward == 0.0


def _harbor_task(target: Greeter, environment: str) -> bytes:
    """A Harbor task whose tests fetch from the test host, as a .tar.gz upload."""
    files = {
        "instruction.md": "Nothing to do: the tests fetch their runner.\n",
        "task.toml": f"[verifier]\ntimeout_sec = 60.0\n\n[environment]\n{environment}\n"
        'workdir = "/app"\n',  # collected after the agent, unlike /
        "environment/Dockerfile": "FROM rollout/base\n",
        "tests/test.sh": (
            "#!/bin/bash\n"
            f"if {_reaches(target.address, target.port)}; then echo 1; else echo 0; fi"
            " > /logs/verifier/reward.txt\n"
        ),
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            member = tarfile.TarInfo(f"fetching_task/{name}")
            member.size, member.mode = len(data), 0o755
            tar.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


def _harbor_spec(target: Greeter, environment: str) -> pb.RolloutSpec:
    spec = json_format.ParseDict(
        {
            "agent": {"name": "command", "command": _agent_probe(target)},
            "sandbox": {"image": "rollout/base"},  # the caller's image: nothing is built
        },
        pb.RolloutSpec(),
    )
    spec.harbor_task.archive = _harbor_task(target, environment)
    return spec


async def test_a_harbor_task_allowing_internet_verifies_online_while_its_agent_had_none(
    stub: pb_grpc.RolloutServiceAsyncStub,
    greeter: Greeter,  # noqa: F811 - the fixture imported above
) -> None:
    allowed, denied = await asyncio.gather(
        _run(stub, _harbor_spec(greeter, "allow_internet = true")),
        _run(stub, _harbor_spec(greeter, "allow_internet = false")),
    )
    assert allowed.status == pb.ROLLOUT_STATUS_SUCCEEDED, allowed.result.error.message
    assert allowed.result.files["agent.txt"].endswith(b"Network is unreachable\nblocked\n")
    assert allowed.result.reward == 1.0, list(allowed.result.verify_results)
    assert allowed.spec.sandbox.network == pb.NETWORK_POLICY_NONE
    assert allowed.spec.sandbox.verifier_network == pb.NETWORK_POLICY_FULL
    assert denied.result.reward == 0.0, list(denied.result.verify_results)
    assert denied.spec.sandbox.verifier_network == pb.NETWORK_POLICY_NONE


@pytest.mark.parametrize(
    ("sandbox", "says"),
    [
        ({"verifier_network": 7}, "7 is not a rollout.v1.NetworkPolicy value"),
        (
            {"network": pb.NETWORK_POLICY_FULL, "verifier_network": pb.NETWORK_POLICY_NONE},
            "NONE under network FULL is not supported",
        ),
    ],
)
async def test_a_bad_verifier_network_is_refused_naming_it(
    stub: pb_grpc.RolloutServiceAsyncStub, sandbox: dict[str, int], says: str
) -> None:
    spec = pb.RolloutSpec(
        task=pb.Task(instruction="x", verify=["true"]),
        agent=pb.Agent(name="command", command="true"),
        sandbox=pb.SandboxSpec(**sandbox),  # type: ignore[arg-type]
    )
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.RunRollout(pb.RunRolloutRequest(spec=spec))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = error.value.details() or ""
    assert "spec.sandbox.verifier_network" in details, details
    assert says in details, details
