"""Every call of the clients, written once: the request built (and checked, in `messages`),
the deadline it gets, what of the response the method returns. `BaseClient` turns each into
a method of `RolloutClient` (blocking) and `AsyncRolloutClient` (awaitable); the docstrings
here are theirs.

    Unary[T]      one request, one response: the RPC, its request and deadline, and `shape`,
                  the part of the response the method returns
    Stream[T]     one request, a stream of responses, each shaped
    Pages[T]      a list RPC, page after page: `page(token)` is one page's call

Interrupting a blocking call, or cancelling the task awaiting an asyncio one, cancels it on
the server (a rollout or group run, a command's Exec); closing a stream's iterator early
(`aclose()` on the asyncio client) cancels the stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from google.protobuf.message import Message
from rollout.v1 import rollout_pb2 as pb

from rollout_client import messages
from rollout_client.messages import GroupStatusLike, SpecLike, StatusLike, ViewLike

__all__ = [
    "Call",
    "Configured",
    "Pages",
    "Stream",
    "Unary",
    "cancel",
    "cancel_group",
    "close_session",
    "exec_stream",
    "get",
    "get_group",
    "get_session",
    "list_all",
    "list_all_groups",
    "list_files",
    "list_groups",
    "list_rollouts",
    "list_sessions",
    "open_session",
    "pause_model_calls",
    "read_file",
    "resume_model_calls",
    "run",
    "run_group",
    "set_policy_version",
    "start",
    "start_group",
    "verify_session",
    "watch",
    "watch_group",
    "watch_session",
    "write_file",
]


T = TypeVar("T")


class Configured(Protocol):
    """What a call reads of its client: the deadline of the quick calls."""

    @property
    def timeout(self) -> float | None: ...


@dataclass(frozen=True)
class Call(Generic[T]):
    """`rpc` (the stub's method) with `request` and its deadline, and `shape`: what of a
    response the method returns."""

    rpc: str
    request: Message
    timeout: float | None
    shape: Callable[[Any], T]


class Unary(Call[T]):
    """A unary call: one response, shaped."""


class Stream(Call[T]):
    """A server-streaming call: each response shaped as it comes."""


@dataclass(frozen=True)
class Pages(Generic[T]):
    """Every page of a list call, fetched as the iteration goes, until a page has no
    `next_page_token`."""

    page: Callable[[str], Unary[Any]]
    items: Callable[[Any], Iterable[T]]


def _whole(response: Any) -> Any:
    return response


def _rollout(response: Any) -> pb.Rollout:
    return response.rollout  # type: ignore[no-any-return]


def _group(response: Any) -> pb.Group:
    return response.group  # type: ignore[no-any-return]


def _session(response: Any) -> pb.Session:
    return response.session  # type: ignore[no-any-return]


def _event(response: Any) -> pb.RolloutEvent:
    return response.event  # type: ignore[no-any-return]


def run(
    client: Configured,
    spec: SpecLike,
    *,
    view: ViewLike = pb.RESULT_VIEW_UNSPECIFIED,
    timeout: float | None = None,
) -> Unary[pb.Rollout]:
    """Run a rollout to its terminal status. Interrupting the call (cancelling the task)
    cancels the rollout."""
    return Unary("RunRollout", messages.run_request(spec, view), timeout, _rollout)


def start(client: Configured, spec: SpecLike) -> Unary[pb.Rollout]:
    """Admit a rollout and return at once; follow it with `watch`."""
    return Unary("StartRollout", messages.start_request(spec), client.timeout, _rollout)


def watch(
    client: Configured,
    rollout_id: str = "",
    *,
    after_seq: int = 0,
    labels: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> Stream[pb.RolloutEvent]:
    """Events of one rollout after `after_seq`, ending with its `finished` event; with no
    id, the live events of every rollout carrying `labels` (never ends by itself).

    Closing the iterator early (`aclose()`, asyncio) cancels the stream.
    """
    request = messages.watch_request(rollout_id, after_seq, labels)
    return Stream("WatchRollout", request, timeout, _event)


def get(
    client: Configured, rollout_id: str, *, view: ViewLike = pb.RESULT_VIEW_UNSPECIFIED
) -> Unary[pb.Rollout]:
    return Unary("GetRollout", messages.get_request(rollout_id, view), client.timeout, _rollout)


def list_rollouts(
    client: Configured,
    *,
    labels: Mapping[str, str] | None = None,
    statuses: Iterable[StatusLike] = (),
    page_size: int = 0,
    page_token: str = "",
    view: ViewLike = pb.RESULT_VIEW_UNSPECIFIED,
) -> Unary[pb.ListRolloutsResponse]:
    """One page of rollouts, newest first; see `list_all` for every page."""
    request = messages.list_request(labels, statuses, page_size, page_token, view)
    return Unary("ListRollouts", request, client.timeout, _whole)


def list_all(
    client: Configured,
    *,
    labels: Mapping[str, str] | None = None,
    statuses: Iterable[StatusLike] = (),
    page_size: int = 0,
    view: ViewLike = pb.RESULT_VIEW_UNSPECIFIED,
) -> Pages[pb.Rollout]:
    """Every matching rollout, newest first, fetching pages as the iteration goes."""
    kept = tuple(statuses)

    def page(token: str) -> Unary[pb.ListRolloutsResponse]:
        return list_rollouts(
            client, labels=labels, statuses=kept, page_size=page_size, page_token=token, view=view
        )

    return Pages(page, lambda response: response.rollouts)


def cancel(client: Configured, rollout_id: str, reason: str = "") -> Unary[pb.Rollout]:
    """Cancel a rollout; a terminal rollout is returned unchanged."""
    request = messages.cancel_request(rollout_id, reason)
    return Unary("CancelRollout", request, client.timeout, _rollout)


def run_group(
    client: Configured, spec: pb.GroupSpec, *, timeout: float | None = None
) -> Unary[pb.Group]:
    """Run a group (see `messages.group_spec`) until it is terminal. Interrupting the call
    (cancelling the task) cancels the group."""
    return Unary("RunGroup", pb.RunGroupRequest(spec=spec), timeout, _group)


def start_group(client: Configured, spec: pb.GroupSpec) -> Unary[pb.Group]:
    """Admit a group and return at once; follow it with `watch_group`."""
    return Unary("StartGroup", pb.StartGroupRequest(spec=spec), client.timeout, _group)


def watch_group(
    client: Configured, group_id: str, *, timeout: float | None = None
) -> Stream[pb.WatchGroupResponse]:
    """Each member's terminal rollout as it ends (`member`), then the group (`group`)."""
    return Stream("WatchGroup", pb.WatchGroupRequest(group_id=group_id), timeout, _whole)


def get_group(client: Configured, group_id: str) -> Unary[pb.Group]:
    return Unary("GetGroup", pb.GetGroupRequest(group_id=group_id), client.timeout, _group)


def list_groups(
    client: Configured,
    *,
    labels: Mapping[str, str] | None = None,
    statuses: Iterable[GroupStatusLike] = (),
    page_size: int = 0,
    page_token: str = "",
) -> Unary[pb.ListGroupsResponse]:
    """One page of groups, newest first; see `list_all_groups` for every page."""
    request = messages.list_groups_request(labels, statuses, page_size, page_token)
    return Unary("ListGroups", request, client.timeout, _whole)


def list_all_groups(
    client: Configured,
    *,
    labels: Mapping[str, str] | None = None,
    statuses: Iterable[GroupStatusLike] = (),
    page_size: int = 0,
) -> Pages[pb.Group]:
    """Every matching group, newest first, fetching pages as the iteration goes."""
    kept = tuple(statuses)

    def page(token: str) -> Unary[pb.ListGroupsResponse]:
        return list_groups(
            client, labels=labels, statuses=kept, page_size=page_size, page_token=token
        )

    return Pages(page, lambda response: response.groups)


def cancel_group(client: Configured, group_id: str, reason: str = "") -> Unary[pb.Group]:
    """Cancel a group and its running members; a terminal group is returned unchanged."""
    request = pb.CancelGroupRequest(group_id=group_id, reason=reason)
    return Unary("CancelGroup", request, client.timeout, _group)


def set_policy_version(
    client: Configured,
    version: int,
    *,
    base_url: str = "",
    model: str = "",
    labels: Mapping[str, str] | None = None,
) -> Unary[int]:
    """Say the endpoint (`base_url`, `model`) or the rollouts with `labels` now serve
    policy `version`; returns how many live rollouts it reached."""
    selector = messages.model_call_selector(base_url, model, labels)
    request = pb.SetPolicyVersionRequest(selector=selector, version=version)
    return Unary("SetPolicyVersion", request, client.timeout, lambda response: response.rollouts)


def pause_model_calls(
    client: Configured,
    *,
    base_url: str = "",
    model: str = "",
    labels: Mapping[str, str] | None = None,
    abort_in_flight: bool = False,
    timeout: float | None = None,
) -> Unary[pb.PauseModelCallsResponse]:
    """Hold the selected rollouts' model calls at the proxy; returns once the calls in
    flight have finished (or were aborted, to be retried after the resume)."""
    selector = messages.model_call_selector(base_url, model, labels)
    request = pb.PauseModelCallsRequest(selector=selector, abort_in_flight=abort_in_flight)
    return Unary("PauseModelCalls", request, timeout, _whole)


def resume_model_calls(
    client: Configured,
    *,
    base_url: str = "",
    model: str = "",
    labels: Mapping[str, str] | None = None,
) -> Unary[pb.ResumeModelCallsResponse]:
    """Lift the pause made with the same selector."""
    selector = messages.model_call_selector(base_url, model, labels)
    request = pb.ResumeModelCallsRequest(selector=selector)
    return Unary("ResumeModelCalls", request, client.timeout, _whole)


def open_session(
    client: Configured,
    spec: SpecLike,
    *,
    copies: int = 0,
    idle_timeout_s: float | None = None,
    max_lifetime_s: float | None = None,
    timeout: float | None = None,
) -> Unary[Sequence[pb.Session]]:
    """Open `copies` sessions of `spec` (0: one), each READY or FAILED (docs/sessions.md).
    It lasts as long as the setup, so it takes its own `timeout`, unbounded by default."""
    request = messages.open_session_request(spec, copies, idle_timeout_s, max_lifetime_s)
    return Unary("OpenSession", request, timeout, lambda response: [*response.sessions])


def exec_stream(
    client: Configured,
    session_id: str,
    command: str,
    *,
    timeout_s: float | None = None,
    cwd: str = "",
    env: Mapping[str, str] | None = None,
    max_output_bytes: int = 0,
    timeout: float | None = None,
) -> Stream[pb.ExecResponse]:
    """Run `command` in the session: its output chunks as they come, then its result.
    `timeout_s` is the command's limit (the server kills it); `timeout` the call's.
    Closing the iterator early (`aclose()`, asyncio) cancels the call, which kills the
    command. `exec` takes the same arguments and returns them gathered (`ExecOutcome`)."""
    request = messages.exec_request(session_id, command, timeout_s, cwd, env, max_output_bytes)
    return Stream("Exec", request, timeout, _whole)


def read_file(
    client: Configured, session_id: str, path: str, *, max_bytes: int = 0
) -> Unary[pb.ReadFileResponse]:
    request = messages.read_file_request(session_id, path, max_bytes)
    return Unary("ReadFile", request, client.timeout, _whole)


def write_file(client: Configured, session_id: str, path: str, content: bytes) -> Unary[int]:
    """Write `content` at `path` in the session; the bytes written."""
    request = messages.write_file_request(session_id, path, content)
    return Unary("WriteFile", request, client.timeout, lambda response: response.size)


def list_files(
    client: Configured, session_id: str, directory: str = "", *, max_entries: int = 0
) -> Unary[pb.ListFilesResponse]:
    request = messages.list_files_request(session_id, directory, max_entries)
    return Unary("ListFiles", request, client.timeout, _whole)


def verify_session(
    client: Configured, session_id: str, *, timeout: float | None = None
) -> Unary[pb.Session]:
    """End the session with its reward; returns it terminal. It lasts as long as the
    verifier, so it takes its own `timeout`, unbounded by default."""
    request = messages.verify_session_request(session_id)
    return Unary("VerifySession", request, timeout, _session)


def close_session(client: Configured, session_id: str) -> Unary[pb.Session]:
    """End the session unverified; its sandbox is gone on return (an ended one is
    returned as it is)."""
    request = messages.close_session_request(session_id)
    return Unary("CloseSession", request, client.timeout, _session)


def get_session(client: Configured, session_id: str) -> Unary[pb.Session]:
    request = messages.get_session_request(session_id)
    return Unary("GetSession", request, client.timeout, _session)


def list_sessions(
    client: Configured,
    *,
    labels: Mapping[str, str] | None = None,
    page_size: int = 0,
    page_token: str = "",
) -> Unary[pb.ListSessionsResponse]:
    """One page of sessions, newest first."""
    request = messages.list_sessions_request(labels, page_size, page_token)
    return Unary("ListSessions", request, client.timeout, _whole)


def watch_session(
    client: Configured, session_id: str, *, after_seq: int = 0, timeout: float | None = None
) -> Stream[pb.RolloutEvent]:
    """The session's events after `after_seq`, replayed then live, until it ends."""
    request = messages.watch_session_request(session_id, after_seq)
    return Stream("WatchSession", request, timeout, _event)
