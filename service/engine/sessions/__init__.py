"""Sessions: a sandbox a caller keeps and acts in, made and verified by a rollout's rules.

OpenSession  the rollout manager admits a rollout whose agent is the caller
             (`agent.CallerAgent`): sandbox, model route, staging and setup as for any
             rollout (copies: set up once, forked); READY when the agent phase begins
Exec / files through `live.LiveSession`, straight to the sandbox, each an event
VerifySession the agent phase ends: the rollout's own verification runs
             (`engine.verification`: every process killed, verifier files staged only
             then, FRESH or IN_PLACE), then teardown: VERIFIED with the reward
CloseSession, idle timeout, lifetime, shutdown: the rollout is cancelled, its sandbox
             killed: CLOSED or EXPIRED
restart      the record is a rollout no server runs: ended FAILED (INTERNAL), its
             sandbox swept, as any interrupted rollout's
"""

from service.engine.sessions.live import ExecDone, LiveSession, OutputChunk
from service.engine.sessions.manager import SessionManager
from service.engine.sessions.requests import CommandRequest, OpenRequest
from service.engine.sessions.status import session_status

__all__ = [
    "CommandRequest",
    "ExecDone",
    "LiveSession",
    "OpenRequest",
    "OutputChunk",
    "SessionManager",
    "session_status",
]
