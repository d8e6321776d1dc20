"""The clients' session methods against a real server: the sync client through a whole
session, the asyncio one through the same calls, each answer read as docs/sessions.md says."""

from __future__ import annotations

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout_client import (
    AsyncRolloutClient,
    NotFoundError,
    RolloutClient,
    reward_of,
    session_status_name,
)

pytestmark = pytest.mark.e2e
SPEC = {
    "task": {"instruction": "make answer.txt say 42", "verify": ["grep -qx 42 answer.txt"]},
    "labels": {"suite": "session-client"},
}


def test_the_sync_client_opens_steps_files_and_verifies(server_target: str) -> None:
    with RolloutClient(server_target) as client:
        (session,) = client.open_session(SPEC, idle_timeout_s=120)
        assert session_status_name(session.status) == "READY", session.result.error
        assert client.write_file(session.id, "a.txt", b"6\n") == 2
        ran = client.exec(session.id, "echo $(( $(cat a.txt) * 7 )) | tee answer.txt; echo e >&2")
        assert (bytes(ran.stdout), bytes(ran.stderr), ran.exit_code) == (b"42\n", b"e\n", 0)
        slow = client.exec(session.id, "sleep 30", timeout_s=0.5)
        assert slow.timed_out
        assert slow.exit_code == -1
        assert client.read_file(session.id, "answer.txt").content == b"42\n"
        listed = client.list_files(session.id)
        assert sorted(f.path for f in listed.files) == ["a.txt", "answer.txt"]
        assert client.get_session(session.id).commands == 2
        page = client.list_sessions(labels={"suite": "session-client"})
        assert session.id in [s.id for s in page.sessions]
        verified = client.verify_session(session.id)
        assert session_status_name(verified.status) == "VERIFIED"
        assert verified.result.reward == 1.0
        events = list(client.watch_session(session.id))
        assert events[-1].HasField("finished")
        with pytest.raises(NotFoundError):
            client.get_session("no-such-session")


async def test_the_async_client_makes_the_same_calls(server_target: str) -> None:
    async with AsyncRolloutClient(server_target) as client:
        (session,) = await client.open_session(SPEC)
        items = [item async for item in client.exec_stream(session.id, "printf 41")]
        assert items[-1].result.exit_code == 0
        assert b"".join(i.output.data for i in items if i.HasField("output")) == b"41"
        assert (await client.exec(session.id, "exit 4")).exit_code == 4
        assert await client.write_file(session.id, "answer.txt", b"42\n") == 3
        assert (await client.read_file(session.id, "answer.txt")).content == b"42\n"
        assert [f.path for f in (await client.list_files(session.id)).files] == ["answer.txt"]
        closed = await client.close_session(session.id)
        assert closed.status == pb.SESSION_STATUS_CLOSED
        assert reward_of(await client.get(session.id)) is None
        (other,) = await client.open_session(SPEC)
        verified = await client.verify_session(other.id)
        assert verified.result.reward == 0.0
        assert [e async for e in client.watch_session(other.id)][-1].HasField("finished")
