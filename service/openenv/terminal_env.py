"""The terminal environment: `reset` opens a session, `step` runs a command or verifies.

    reset(harbor_task=... | harbor_archive=... | task={...}, sandbox={...})
                         -> Sessions.open  -> observation: instruction, session_id
    step(command=...)    -> Sessions.exec  -> stdout, stderr, exit_code, timed_out
    step(verify=True)    -> Sessions.verify -> reward, done; the session is over
    close (the WebSocket ends, a new reset) -> Sessions.close

One environment per WebSocket session (OpenEnv makes one per connection), so a session lives
exactly as long as the connection that opened it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment

from service.openenv.sessions import Sessions
from service.openenv.terminal_models import TerminalAction, TerminalObservation, TerminalState
from service.openenv.terminal_task import session_spec

__all__ = ["TerminalEnvironment"]


class TerminalEnvironment(Environment):
    """A session stepped one command at a time."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, sessions: Sessions) -> None:
        super().__init__()
        self._sessions = sessions
        self._state = TerminalState(episode_id=str(uuid4()))

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        harbor_task: str = "",
        harbor_archive: str = "",
        task: Mapping[str, Any] | None = None,
        sandbox: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> TerminalObservation:
        spec = session_spec(harbor_task, harbor_archive, task, sandbox)
        self.close()
        opened = self._sessions.open(spec)
        self._state = TerminalState(
            episode_id=episode_id or str(uuid4()), session_id=opened.session_id
        )
        return TerminalObservation(session_id=opened.session_id, instruction=opened.instruction)

    def step(
        self, action: TerminalAction, timeout_s: float | None = None, **_: Any
    ) -> TerminalObservation:
        session_id = self._state.session_id
        if session_id is None:
            raise RuntimeError("no session: call reset first (or again, after verify)")
        self._state.step_count += 1
        if action.verify:
            verified = self._sessions.verify(session_id)
            self._state.session_id, self._state.verified = None, True
            return TerminalObservation(
                session_id=session_id,
                done=True,
                reward=verified.reward,
                error=verified.error,
                error_kind=verified.error_kind,
            )
        ran = self._sessions.exec(session_id, action.command, action.timeout_s or timeout_s)
        self._state.last_exit_code = ran.exit_code
        return TerminalObservation(
            session_id=session_id,
            stdout=ran.stdout,
            stderr=ran.stderr,
            exit_code=ran.exit_code,
            timed_out=ran.timed_out,
        )

    @property
    def state(self) -> TerminalState:
        return self._state

    def close(self) -> None:
        session_id, self._state.session_id = self._state.session_id, None
        if session_id is not None:
            self._sessions.close(session_id)
