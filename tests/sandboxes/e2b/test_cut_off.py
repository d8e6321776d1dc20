"""A replica cut off from PostgreSQL (a relay between them, severed) while its rollout runs on
E2B: once its lease has expired by its own clock, it kills the rollout's E2B sandbox at once,
while still cut off (no other replica here, so no takeover kills it by label). Mended, it gives
that lease up and ends the rollout as interrupted, and nothing is left on the cloud.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import urlsplit

import grpc
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.e2b_support import eventually
from testing.fakes.e2b_cloud import FakeE2B
from testing.server_process import ServerProcess
from testing.specs import command_spec
from tests.e2e.db_relay import relayed
from tests.e2e.test_replica_fencing import _settled_on
from tests.e2e.test_replicas import database_url as database_url  # the PostgreSQL fixture
from tests.sandboxes.e2b.test_rollout import _running

pytestmark = pytest.mark.e2e

_LEASE_S = 4
_STOPPED = "could not reach the database"
_LOST = "lost this server's database lease"


async def test_a_replica_cut_off_from_the_database_kills_its_e2b_sandbox(
    cloud: FakeE2B, tmp_path: Path, database_url: str
) -> None:
    parts = urlsplit(database_url)
    assert parts.port is not None
    with relayed(parts.port) as relay:
        netloc = f"{parts.username}@127.0.0.1:{relay.port}"
        env = cloud.environment() | {
            "ROLLOUT_DATABASE_URL": parts._replace(netloc=netloc).geturl(),
            "ROLLOUT_DATABASE_LEASE_S": str(_LEASE_S),
            "ROLLOUT_E2B_CREATES_PER_S": "0",
            "ROLLOUT_INSTANCE_ID": "cut",
        }
        server = ServerProcess(tmp_path / "server", env)
        # The fake cloud shares this event loop: never block it on the server.
        await asyncio.to_thread(server.start)
        try:
            async with grpc.aio.insecure_channel(server.target) as channel:
                stub = pb_grpc.RolloutServiceStub(channel)
                spec = command_spec("sleep 302", sandbox={"backend": "e2b", "template": "tmpl"})
                started = await stub.StartRollout(pb.StartRolloutRequest(spec=spec))
                await eventually(lambda: _running(cloud, "sleep 302"), timeout_s=60)
                (sandbox_id,) = cloud.live_ids()

                relay.sever()
                # A bound on a kill that without fencing never comes while cut off.
                await eventually(lambda: not cloud.live_ids(), timeout_s=_LEASE_S * 5)
                stopped = server.text()
                relay.mend()
                ended = await asyncio.wait_for(_settled_on(stub, started.rollout.id), 120)
        finally:
            assert await asyncio.to_thread(server.stop) == 0, server.text()

    assert _STOPPED in stopped
    assert _LOST not in stopped  # it had not reached the database since
    assert not cloud.records[sandbox_id].sandbox.alive
    assert ended.result.error.kind == pb.ERROR_KIND_INTERNAL
    assert "stopped renewing its lease" in ended.result.error.message
    assert cloud.live_ids() == set()
