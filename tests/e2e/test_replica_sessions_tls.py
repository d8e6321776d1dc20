"""A session's call forwarded between replicas that speak TLS (docs/sessions.md): the
forwarding channel checks the holder's certificate against ROLLOUT_TLS_PEER_CA_FILE, so a
replica trusting the holder's CA forwards, and one trusting another CA is refused with the
holder named, never served in the clear."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess, running_all
from tests.e2e.auth_support import Certificates, make_certificates
from tests.e2e.test_replicas import database_url as database_url  # the PostgreSQL fixture
from tests.e2e.test_sessions import SOLVABLE, open_one, run

pytestmark = pytest.mark.e2e

if TYPE_CHECKING:
    Stubs = dict[str, pb_grpc.RolloutServiceAsyncStub]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def replicas(
    tmp_path_factory: pytest.TempPathFactory, database_url: str, certs: Certificates
) -> Iterator[dict[str, ServerProcess]]:
    """`trusting` checks replicas against their CA; `mistrusting` against another one."""
    peer_cas = {"trusting": certs.ca, "mistrusting": certs.other_ca}
    servers = {
        name: ServerProcess(
            tmp_path_factory.mktemp(f"tls-replica-{name}"),
            {
                "ROLLOUT_DATABASE_URL": database_url,
                "ROLLOUT_INSTANCE_ID": name,
                "ROLLOUT_TLS_CERT_FILE": str(certs.server_cert),
                "ROLLOUT_TLS_KEY_FILE": str(certs.server_key),
                "ROLLOUT_TLS_PEER_CA_FILE": str(peer_ca),
            },
        )
        for name, peer_ca in peer_cas.items()
    }
    with running_all(list(servers.values())):
        yield servers


@pytest.fixture
async def stubs(replicas: dict[str, ServerProcess], certs: Certificates) -> AsyncIterator[Stubs]:
    credentials = grpc.ssl_channel_credentials(certs.ca.read_bytes())
    async with (
        grpc.aio.secure_channel(replicas["trusting"].target, credentials) as trusting,
        grpc.aio.secure_channel(replicas["mistrusting"].target, credentials) as mistrusting,
    ):
        yield {
            "trusting": pb_grpc.RolloutServiceStub(trusting),
            "mistrusting": pb_grpc.RolloutServiceStub(mistrusting),
        }


async def test_a_replica_trusting_the_holders_ca_forwards_over_tls(stubs: Stubs) -> None:
    session = await open_one(stubs["mistrusting"], SOLVABLE)
    out, _, result = await run(
        stubs["trusting"], session.id, "echo 42 > answer.txt; cat answer.txt"
    )
    verified = await stubs["trusting"].VerifySession(pb.VerifySessionRequest(session_id=session.id))

    assert (out, result.exit_code) == (b"42\n", 0)
    assert verified.session.status == pb.SESSION_STATUS_VERIFIED, verified.session.result.error
    assert verified.session.result.reward == 1.0


async def test_a_holder_whose_certificate_does_not_check_out_is_unavailable(
    stubs: Stubs,
) -> None:
    session = await open_one(stubs["trusting"], SOLVABLE)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(stubs["mistrusting"], session.id, "true")
    listed = await stubs["trusting"].ListFiles(pb.ListFilesRequest(session_id=session.id))
    closed = await stubs["trusting"].CloseSession(pb.CloseSessionRequest(session_id=session.id))

    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "the server holding this session (trusting) is unavailable" in (
        caught.value.details() or ""
    )
    assert "notes.txt" in {entry.path for entry in listed.files}  # untouched on its holder
    assert closed.session.status == pb.SESSION_STATUS_CLOSED
