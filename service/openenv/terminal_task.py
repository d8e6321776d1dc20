"""The terminal's `reset` arguments as the spec of a session: a Harbor task by name or by
archive, or an inline task; exactly one."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from rollout.v1 import rollout_pb2 as pb
from rollout_client import to_spec

__all__ = ["session_spec"]


def session_spec(
    harbor_task: str = "",
    harbor_archive: str = "",
    task: Mapping[str, Any] | None = None,
    sandbox: Mapping[str, Any] | None = None,
) -> pb.RolloutSpec:
    """The spec `reset` opens a session on; ValueError naming the argument that is wrong.

    `harbor_task` is a task under the server's task roots ("root/name"); `harbor_archive` is
    the task directory as a base64 .tar.gz; `task` is an inline Task in the shape of the
    contract's (instruction, setup, verify, files, ...). `sandbox` is a SandboxSpec (image,
    network, resources).
    """
    given = [name for name, value in _sources(harbor_task, harbor_archive, task) if value]
    if len(given) != 1:
        raise ValueError(
            "reset needs exactly one of harbor_task, harbor_archive or task"
            + (f", got {' and '.join(given)}" if given else "")
        )
    data: dict[str, Any] = {"sandbox": dict(sandbox or {})}
    if harbor_task:
        data["harbor_task"] = {"path": harbor_task}
    elif harbor_archive:
        try:
            archive = base64.b64decode(harbor_archive, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"harbor_archive: not base64 ({exc})") from exc
        data["harbor_task"] = {"archive": archive}
    else:
        data["task"] = dict(task or {})
    return to_spec(data)


def _sources(
    harbor_task: str, harbor_archive: str, task: Mapping[str, Any] | None
) -> list[tuple[str, object]]:
    return [("harbor_task", harbor_task), ("harbor_archive", harbor_archive), ("task", task)]
