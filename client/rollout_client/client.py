"""The blocking client: one channel, one method per RPC, errors translated."""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Self

import grpc
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc

from rollout_client import messages
from rollout_client.connection import auth_metadata, default_target
from rollout_client.errors import translate_errors
from rollout_client.messages import GroupStatusLike, SpecLike, StatusLike, ViewLike

__all__ = ["RolloutClient"]


class RolloutClient:
    """Blocking client of a RolloutService.

    `timeout` (seconds, None for none) bounds the quick calls: start, get, list and cancel.
    `run` and `watch` last as long as the rollout, so they take their own `timeout`, unbounded
    by default. `target` is the server's host:port (None: $ROLLOUT_TARGET, else
    127.0.0.1:50051). `token` is sent as a bearer token on every call (None: $ROLLOUT_TOKEN, if
    set); `credentials` (see `rollout_client.connection.tls_credentials`) turn on TLS.
    `channel_options` are more gRPC channel arguments, after the message limits: e.g.
    `[("grpc.lb_policy_name", "round_robin")]` with a `dns:///name:port` target spreads
    calls over every address the name resolves to (a headless Service's pods).
    Use it as a context manager, or call `close()`, to close the channel.
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        max_message_bytes: int = messages.DEFAULT_MAX_MESSAGE_BYTES,
        timeout: float | None = 30.0,
        credentials: grpc.ChannelCredentials | None = None,
        token: str | None = None,
        channel_options: Sequence[tuple[str, str | int]] = (),
    ) -> None:
        options = [*messages.channel_options(max_message_bytes), *channel_options]
        self.target = default_target() if target is None else target
        self.timeout = timeout
        self._metadata = auth_metadata(token)
        self._channel = (
            grpc.secure_channel(self.target, credentials, options=options)
            if credentials is not None
            else grpc.insecure_channel(self.target, options=options)
        )
        self._stub = rollout_pb2_grpc.RolloutServiceStub(self._channel)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def wait_until_ready(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the server to accept connections (a server still
        starting, say); whether it does."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout_s)
        except grpc.FutureTimeoutError:
            return False
        return True

    def run(
        self,
        spec: SpecLike,
        *,
        view: ViewLike = pb.RESULT_VIEW_UNSPECIFIED,
        timeout: float | None = None,
    ) -> pb.Rollout:
        """Run a rollout to its terminal status. Interrupting the call cancels the rollout."""
        request = messages.run_request(spec, view)
        with translate_errors():
            return self._stub.RunRollout(request, timeout=timeout, metadata=self._metadata).rollout

    def start(self, spec: SpecLike) -> pb.Rollout:
        """Admit a rollout and return at once; follow it with `watch`."""
        request = messages.start_request(spec)
        with translate_errors():
            return self._stub.StartRollout(
                request, timeout=self.timeout, metadata=self._metadata
            ).rollout

    def watch(
        self,
        rollout_id: str = "",
        *,
        after_seq: int = 0,
        labels: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Generator[pb.RolloutEvent, None, None]:
        """Events of one rollout after `after_seq`, ending with its `finished` event; with no
        id, the live events of every rollout carrying `labels` (never ends by itself).

        Closing the iterator early cancels the stream.
        """
        request = messages.watch_request(rollout_id, after_seq, labels)
        call = self._stub.WatchRollout(request, timeout=timeout, metadata=self._metadata)
        try:
            with translate_errors():
                for response in call:
                    yield response.event
        finally:
            call.cancel()

    def get(self, rollout_id: str, *, view: ViewLike = pb.RESULT_VIEW_UNSPECIFIED) -> pb.Rollout:
        request = messages.get_request(rollout_id, view)
        with translate_errors():
            return self._stub.GetRollout(
                request, timeout=self.timeout, metadata=self._metadata
            ).rollout

    def list(
        self,
        *,
        labels: Mapping[str, str] | None = None,
        statuses: Iterable[StatusLike] = (),
        page_size: int = 0,
        page_token: str = "",
        view: ViewLike = pb.RESULT_VIEW_UNSPECIFIED,
    ) -> pb.ListRolloutsResponse:
        """One page of rollouts, newest first; see `list_all` for every page."""
        request = messages.list_request(labels, statuses, page_size, page_token, view)
        with translate_errors():
            return self._stub.ListRollouts(request, timeout=self.timeout, metadata=self._metadata)

    def list_all(
        self,
        *,
        labels: Mapping[str, str] | None = None,
        statuses: Iterable[StatusLike] = (),
        page_size: int = 0,
        view: ViewLike = pb.RESULT_VIEW_UNSPECIFIED,
    ) -> Generator[pb.Rollout, None, None]:
        """Every matching rollout, newest first, fetching pages as the iteration goes."""
        statuses = tuple(statuses)
        token = ""
        while True:
            page = self.list(
                labels=labels, statuses=statuses, page_size=page_size, page_token=token, view=view
            )
            yield from page.rollouts
            token = page.next_page_token
            if not token:
                return

    def cancel(self, rollout_id: str, reason: str = "") -> pb.Rollout:
        """Cancel a rollout; a terminal rollout is returned unchanged."""
        request = messages.cancel_request(rollout_id, reason)
        with translate_errors():
            return self._stub.CancelRollout(
                request, timeout=self.timeout, metadata=self._metadata
            ).rollout

    def open_session(
        self,
        spec: SpecLike,
        *,
        copies: int = 0,
        idle_timeout_s: float | None = None,
        max_lifetime_s: float | None = None,
        timeout: float | None = None,
    ) -> Sequence[pb.Session]:
        """Open `copies` sessions of `spec` (docs/sessions.md); each is READY, or FAILED with
        its error. It lasts as long as setup, so it takes its own `timeout`, unbounded."""
        request = messages.open_session_request(spec, copies, idle_timeout_s, max_lifetime_s)
        with translate_errors():
            response = self._stub.OpenSession(request, timeout=timeout, metadata=self._metadata)
        return response.sessions

    def exec(
        self,
        session_id: str,
        command: str,
        *,
        timeout_s: float | None = None,
        cwd: str = "",
        env: Mapping[str, str] | None = None,
        max_output_bytes: int = 0,
    ) -> Generator[pb.ExecResponse, None, None]:
        """Run `bash -c command` in a session: output chunks as they come, then one result.
        `timeout_s` is the command's (the server kills it); closing the iterator early kills
        it too."""
        request = messages.exec_request(session_id, command, timeout_s, cwd, env, max_output_bytes)
        call = self._stub.Exec(request, metadata=self._metadata)
        try:
            with translate_errors():
                yield from call
        finally:
            call.cancel()

    def read_file(self, session_id: str, path: str, *, max_bytes: int = 0) -> pb.ReadFileResponse:
        """A regular file of a session (`found` false for none; a link is never followed)."""
        request = pb.ReadFileRequest(session_id=session_id, path=path, max_bytes=max_bytes)
        with translate_errors():
            return self._stub.ReadFile(request, timeout=self.timeout, metadata=self._metadata)

    def write_file(self, session_id: str, path: str, content: bytes) -> int:
        """Write a file into a session, making its parents; returns the bytes written."""
        request = pb.WriteFileRequest(session_id=session_id, path=path, content=content)
        with translate_errors():
            return self._stub.WriteFile(request, timeout=self.timeout, metadata=self._metadata).size

    def list_files(
        self, session_id: str, directory: str = "", *, max_entries: int = 0
    ) -> pb.ListFilesResponse:
        """The regular files beneath `directory` (empty: the task's workdir)."""
        request = pb.ListFilesRequest(
            session_id=session_id, directory=directory, max_entries=max_entries
        )
        with translate_errors():
            return self._stub.ListFiles(request, timeout=self.timeout, metadata=self._metadata)

    def verify_session(self, session_id: str, *, timeout: float | None = None) -> pb.Session:
        """End a session with its reward: the rollout's own verification runs."""
        request = pb.VerifySessionRequest(session_id=session_id)
        with translate_errors():
            return self._stub.VerifySession(
                request, timeout=timeout, metadata=self._metadata
            ).session

    def close_session(self, session_id: str) -> pb.Session:
        """End a session unverified; its sandbox is gone when this returns."""
        request = pb.CloseSessionRequest(session_id=session_id)
        with translate_errors():
            return self._stub.CloseSession(
                request, timeout=self.timeout, metadata=self._metadata
            ).session

    def get_session(self, session_id: str) -> pb.Session:
        request = pb.GetSessionRequest(session_id=session_id)
        with translate_errors():
            return self._stub.GetSession(
                request, timeout=self.timeout, metadata=self._metadata
            ).session

    def run_group(self, spec: pb.GroupSpec, *, timeout: float | None = None) -> pb.Group:
        """Run a group (see `messages.group_spec`) until it is terminal. Interrupting the call
        cancels the group."""
        request = pb.RunGroupRequest(spec=spec)
        with translate_errors():
            return self._stub.RunGroup(request, timeout=timeout, metadata=self._metadata).group

    def start_group(self, spec: pb.GroupSpec) -> pb.Group:
        """Admit a group and return at once; follow it with `watch_group`."""
        request = pb.StartGroupRequest(spec=spec)
        with translate_errors():
            return self._stub.StartGroup(
                request, timeout=self.timeout, metadata=self._metadata
            ).group

    def watch_group(
        self, group_id: str, *, timeout: float | None = None
    ) -> Generator[pb.WatchGroupResponse, None, None]:
        """Each member's terminal rollout as it ends (`member`), then the group (`group`)."""
        request = pb.WatchGroupRequest(group_id=group_id)
        call = self._stub.WatchGroup(request, timeout=timeout, metadata=self._metadata)
        try:
            with translate_errors():
                yield from call
        finally:
            call.cancel()

    def get_group(self, group_id: str) -> pb.Group:
        request = pb.GetGroupRequest(group_id=group_id)
        with translate_errors():
            return self._stub.GetGroup(request, timeout=self.timeout, metadata=self._metadata).group

    def list_groups(
        self,
        *,
        labels: Mapping[str, str] | None = None,
        statuses: Iterable[GroupStatusLike] = (),
        page_size: int = 0,
        page_token: str = "",
    ) -> pb.ListGroupsResponse:
        """One page of groups, newest first; see `list_all_groups` for every page."""
        request = messages.list_groups_request(labels, statuses, page_size, page_token)
        with translate_errors():
            return self._stub.ListGroups(request, timeout=self.timeout, metadata=self._metadata)

    def list_all_groups(
        self,
        *,
        labels: Mapping[str, str] | None = None,
        statuses: Iterable[GroupStatusLike] = (),
        page_size: int = 0,
    ) -> Generator[pb.Group, None, None]:
        """Every matching group, newest first, fetching pages as the iteration goes."""
        statuses = tuple(statuses)
        token = ""
        while True:
            page = self.list_groups(
                labels=labels, statuses=statuses, page_size=page_size, page_token=token
            )
            yield from page.groups
            token = page.next_page_token
            if not token:
                return

    def cancel_group(self, group_id: str, reason: str = "") -> pb.Group:
        """Cancel a group and its running members; a terminal group is returned unchanged."""
        request = pb.CancelGroupRequest(group_id=group_id, reason=reason)
        with translate_errors():
            return self._stub.CancelGroup(
                request, timeout=self.timeout, metadata=self._metadata
            ).group

    def set_policy_version(
        self,
        version: int,
        *,
        base_url: str = "",
        model: str = "",
        labels: Mapping[str, str] | None = None,
    ) -> int:
        """Say the endpoint (`base_url`, `model`) or the rollouts with `labels` now serve
        policy `version`; returns how many live rollouts it reached."""
        selector = messages.model_call_selector(base_url, model, labels)
        request = pb.SetPolicyVersionRequest(selector=selector, version=version)
        with translate_errors():
            return self._stub.SetPolicyVersion(
                request, timeout=self.timeout, metadata=self._metadata
            ).rollouts

    def pause_model_calls(
        self,
        *,
        base_url: str = "",
        model: str = "",
        labels: Mapping[str, str] | None = None,
        abort_in_flight: bool = False,
        timeout: float | None = None,
    ) -> pb.PauseModelCallsResponse:
        """Hold the selected rollouts' model calls at the proxy; returns once the calls in
        flight have finished (or were aborted, to be retried after the resume)."""
        selector = messages.model_call_selector(base_url, model, labels)
        request = pb.PauseModelCallsRequest(selector=selector, abort_in_flight=abort_in_flight)
        with translate_errors():
            return self._stub.PauseModelCalls(request, timeout=timeout, metadata=self._metadata)

    def resume_model_calls(
        self, *, base_url: str = "", model: str = "", labels: Mapping[str, str] | None = None
    ) -> pb.ResumeModelCallsResponse:
        """Lift the pause made with the same selector."""
        selector = messages.model_call_selector(base_url, model, labels)
        request = pb.ResumeModelCallsRequest(selector=selector)
        with translate_errors():
            return self._stub.ResumeModelCalls(
                request, timeout=self.timeout, metadata=self._metadata
            )
