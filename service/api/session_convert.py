"""Sessions over the wire: OpenSession and Exec requests in, Session messages out."""

from __future__ import annotations

from rollout.v1 import rollout_pb2 as pb

from service.api.convert import duration, enum_to_proto, rollout_to_proto, timestamp
from service.api.inbound import duration_from_proto, spec_from_proto
from service.engine import CommandRequest, ExecDone, OpenRequest, OutputChunk, session_status
from service.models import SESSION_LABEL, Rollout
from service.sandboxes import OutputStream

__all__ = [
    "command_from_proto",
    "exec_item_to_proto",
    "open_from_proto",
    "session_to_proto",
]

_STREAMS = {OutputStream.STDOUT: pb.EXEC_STREAM_STDOUT, OutputStream.STDERR: pb.EXEC_STREAM_STDERR}


def open_from_proto(message: pb.OpenSessionRequest) -> OpenRequest:
    return OpenRequest(
        spec=spec_from_proto(message.spec),
        copies=message.copies,
        idle_timeout_s=duration_from_proto(message.idle_timeout, "idle_timeout"),
        max_lifetime_s=duration_from_proto(message.max_lifetime, "max_lifetime"),
    )


def command_from_proto(message: pb.ExecRequest) -> CommandRequest:
    return CommandRequest(
        command=message.command,
        timeout_s=duration_from_proto(message.timeout, "timeout"),
        cwd=message.cwd,
        env=dict(message.env),
        max_output_bytes=message.max_output_bytes,
    )


def session_to_proto(rollout: Rollout, *, slim: bool = False) -> pb.Session:
    """A session's record as a Session: the spec as the caller gave it (no agent, no
    session label), the result without the workdir's files or an agent log."""
    record = rollout.result.session
    assert record is not None
    whole = rollout_to_proto(rollout, slim=slim)
    whole.spec.ClearField("agent")
    del whole.spec.labels[SESSION_LABEL]
    whole.result.ClearField("files")
    whole.result.ClearField("agent_log_tail")
    whole.result.ClearField("agent_exit_code")
    return pb.Session(
        id=rollout.id,
        spec=whole.spec,
        status=enum_to_proto(session_status(rollout), "SessionStatus"),  # type: ignore[arg-type]
        create_time=timestamp(rollout.create_time),
        ready_time=timestamp(record.ready_time),
        finish_time=timestamp(rollout.finish_time),
        last_activity_time=timestamp(record.last_activity_time),
        idle_timeout=duration(record.idle_timeout_s),
        max_lifetime=duration(record.max_lifetime_s),
        commands=record.commands,
        result=whole.result,
        tenant=rollout.tenant,
        copy_index=record.copy_index,
        model_base_url=record.model_base_url,
    )


def exec_item_to_proto(item: OutputChunk | ExecDone) -> pb.ExecResponse:
    """An output chunk or the final result of an Exec, as the stream carries it."""
    if isinstance(item, ExecDone):
        result = item.result
        return pb.ExecResponse(
            result=pb.ExecResult(
                exit_code=result.exit_code,
                timed_out=result.timed_out,
                duration=duration(result.duration_s),
                stdout_bytes=result.stdout_bytes,
                stderr_bytes=result.stderr_bytes,
                output_bytes_dropped=item.dropped_bytes,
                index=item.index,
            )
        )
    return pb.ExecResponse(output=pb.ExecOutput(stream=_STREAMS[item.stream], data=item.data))
