"""`SessionManager`: opening sessions, finding them for their calls, ending them.

A session is a rollout whose agent is its caller (`CallerAgent`), run by the rollout
manager like any other: the same admission and running slots (a session never queues:
RESOURCE_EXHAUSTED with RetryInfo when no slot is free now), the same phase machine, store,
events, tenancy, restart and orphan sweep. What this adds: copies set up once and forked
as a group's members are (`engine.template`), the calls' way to the live session, and the
end of every session at shutdown (a session is never left for the grace period).

A session lives in the memory of the server that opened it. Another server sharing the
store sees its record; a call there that needs the sandbox raises SessionElsewhereError
naming the holder and its address, which the API forwards the call to (docs/sessions.md:
replicas).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Coroutine, Mapping
from typing import Any

from service.config import Settings
from service.engine.checks import Checked
from service.engine.manager import RolloutManager
from service.engine.sessions.agent import CallerAgent
from service.engine.sessions.live import LiveSession
from service.engine.sessions.requests import OpenRequest, OpenTerms, checked_open
from service.engine.sessions.status import session_status
from service.engine.template import (
    PreparedFilesystem,
    prepare_filesystem,
    worth_a_template,
)
from service.engine.validation import resolved_timeouts
from service.errors import (
    NotFoundError,
    RolloutFailure,
    SessionElsewhereError,
    SessionStateError,
)
from service.models import (
    SESSION_AGENT,
    SESSION_LABEL,
    AgentSpec,
    Rollout,
    RolloutSpec,
    SessionEnding,
    SessionRecord,
)
from service.sandboxes import SandboxBackend
from service.store import RolloutPage

__all__ = ["SessionManager"]

log = logging.getLogger(__name__)

_VALIDATED_AS = AgentSpec(name="command", command=":")
"""The agent a session's spec is validated with: the rules of every other field are a
rollout's, and a command agent's are none beyond them."""
_NO_INSTRUCTION = "(an interactive session)"


class SessionManager:
    """Owns the sessions this server holds."""

    def __init__(self, rollouts: RolloutManager) -> None:
        self._rollouts = rollouts
        self._live: dict[str, LiveSession] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def settings(self) -> Settings:
        return self._rollouts.settings

    async def open(self, request: OpenRequest, *, tenant: str | None) -> list[Rollout]:
        """Admit `copies` sessions of one setup and return them once each is READY (or
        ended: a failing setup, a sandbox that could not be made)."""
        terms = checked_open(request, self._rollouts.settings)
        spec = await self._rollouts.resolve_task(request.spec)
        validated = _validated(spec)
        checked = await self._rollouts.checked(validated)
        spec = _session_spec(validated, terms)
        n = terms.copies
        admission = self._rollouts.admission
        async with admission.admitting_unit(n, running=True, what=f"{n} session(s)"):
            admission.reserve(n)
        sessions: list[LiveSession] = []
        try:
            prepared = await self._prepared(checked.backend, spec, n)
            for index in range(n):
                parts = dataclasses.replace(checked, agent=CallerAgent())
                sessions.append(await self._start(spec, parts, terms, index, tenant, prepared))
                admission.release(1)
                n -= 1
            if prepared is not None:
                self._spawn(_released_after(prepared, [s.id for s in sessions], self._rollouts))
            for session in sessions:
                await session.opened.wait()
        except asyncio.CancelledError:  # the caller went away: nothing of it is left
            await asyncio.shield(self._end_all(sessions, "OpenSession was cancelled"))
            raise
        finally:
            admission.release(n)
        return [session.rollout for session in sessions]

    async def _prepared(
        self, backend: SandboxBackend, spec: RolloutSpec, copies: int
    ) -> PreparedFilesystem | None:
        """Set the task up once for several copies (None: one copy, or it cannot fork, or
        the template failed: each copy then sets up, and fails, on its own)."""
        if not worth_a_template(spec, copies, backend):
            return None
        _, command_timeout_s, _ = resolved_timeouts(spec, self._rollouts.settings)
        name = f"session-template-{uuid.uuid4().hex}"
        try:
            return await prepare_filesystem(
                backend, spec, name=name, command_timeout_s=command_timeout_s
            )
        except RolloutFailure as exc:
            log.info("%s: set up once failed, each copy sets up on its own: %s", name, exc)
            return None

    async def _start(
        self,
        spec: RolloutSpec,
        parts: Checked,
        terms: OpenTerms,
        index: int,
        tenant: str | None,
        prepared: PreparedFilesystem | None,
    ) -> LiveSession:
        record = SessionRecord(
            idle_timeout_s=terms.idle_timeout_s,
            max_lifetime_s=terms.max_lifetime_s,
            copy_index=index,
        )
        rollout = await self._rollouts.submit_session(
            spec, parts, tenant=tenant or "", record=record, prepared=prepared
        )
        agent = parts.agent
        assert isinstance(agent, CallerAgent)
        session = LiveSession(rollout, spec, agent, self._rollouts)
        self._live[rollout.id] = session
        self._spawn(self._follow(session))
        return session

    async def _follow(self, session: LiveSession) -> None:
        try:
            await session.follow()
        finally:
            self._live.pop(session.id, None)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def held(self, session_id: str, tenant: str | None) -> LiveSession:
        """The live session for a call: NOT_FOUND when it is no session of the tenant's,
        FAILED_PRECONDITION when it ended, SessionElsewhereError when another live server
        holds it."""
        session = self._live.get(session_id)
        if session is not None and (tenant is None or session.rollout.tenant == tenant):
            return session
        rollout = await self.get(session_id, tenant=tenant)
        if rollout.terminal:
            status = session_status(rollout).value.upper()
            raise SessionStateError(f"session {session_id} has ended ({status})")
        holder = await self._rollouts.holder(session_id)
        if holder is None:  # its server is gone: the takeover ends it
            raise SessionStateError(
                f"session {session_id} is held by a server sharing this store that no longer "
                "renews its lease; it is ending"
            )
        where = f" at {holder.address}" if holder.address else " (it advertises no address)"
        raise SessionElsewhereError(
            f"session {session_id} is held by server {holder.instance!r}{where}, another "
            "server sharing this store (docs/sessions.md#restart-and-replicas)",
            instance=holder.instance,
            address=holder.address,
        )

    async def get(self, session_id: str, *, tenant: str | None) -> Rollout:
        """A session's record, live or stored; NOT_FOUND for anything but a session."""
        session = self._live.get(session_id)
        if session is not None and (tenant is None or session.rollout.tenant == tenant):
            return session.rollout
        try:
            rollout = await self._rollouts.get(session_id, tenant=tenant)
        except NotFoundError:
            raise NotFoundError(f"no session {session_id!r}") from None
        if rollout.result.session is None:
            raise NotFoundError(f"no session {session_id!r}")
        return rollout

    async def list_sessions(
        self,
        *,
        labels: Mapping[str, str],
        page_size: int,
        page_token: str,
        tenant: str | None,
    ) -> RolloutPage:
        """Sessions newest first (slim records), of the tenant's, carrying `labels`."""
        return await self._rollouts.list(
            labels={**labels, SESSION_LABEL: "1"},
            statuses=[],
            page_size=page_size,
            page_token=page_token,
            slim=True,
            take=lambda rollout: True,
            tenant=tenant,
        )

    async def close(self, session_id: str, *, tenant: str | None) -> Rollout:
        """End a session without verifying it; an ended one is returned as it is."""
        session = self._live.get(session_id)
        if session is None or (tenant is not None and session.rollout.tenant != tenant):
            rollout = await self.get(session_id, tenant=tenant)
            if not rollout.terminal:
                await self.held(session_id, tenant)  # raises: another server's
            return rollout
        return await session.end(SessionEnding.CLOSE, "closed by CloseSession")

    async def shutdown(self) -> None:
        """End every session now (the server is stopping): their sandboxes are gone on return."""
        await self._end_all(list(self._live.values()), "the server is shutting down")
        for task in list(self._tasks):
            task.cancel()

    async def _end_all(self, sessions: list[LiveSession], reason: str) -> None:
        ending = [session.end(SessionEnding.CLOSE, reason) for session in sessions]
        await asyncio.gather(*ending, return_exceptions=True)


def _validated(spec: RolloutSpec) -> RolloutSpec:
    """The spec as a rollout's rules check it (`_VALIDATED_AS`), an instruction filled in."""
    instruction = spec.task.instruction or _NO_INSTRUCTION
    task = spec.task.model_copy(update={"instruction": instruction})
    return spec.model_copy(update={"agent": _VALIDATED_AS, "task": task})


def _session_spec(spec: RolloutSpec, terms: OpenTerms) -> RolloutSpec:
    """What a session's rollout runs: the caller as its agent, for its lifetime, labelled."""
    return spec.model_copy(
        update={
            "agent": AgentSpec(name=SESSION_AGENT),
            "agent_timeout_s": terms.max_lifetime_s,
            "labels": {**spec.labels, SESSION_LABEL: "1"},
        }
    )


async def _released_after(
    prepared: PreparedFilesystem, session_ids: list[str], rollouts: RolloutManager
) -> None:
    """Free the copies' shared setup once none of them is left."""
    try:
        for session_id in session_ids:
            with contextlib.suppress(NotFoundError):
                await rollouts.wait(session_id)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.shield(prepared.snapshot.release())
