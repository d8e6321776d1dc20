"""Sandboxes: the `Sandbox` and `SandboxBackend` protocols (`base`), what every backend shares
(output capture, deadlines, seals, warm agents' plans) and one subpackage per backend
(`local/`, `e2b/`), each built by name through `service.registry`. What other rooms use is
exported here; nothing is imported until it is asked for (`service.door`), because the local
sandbox's fork server imports `local/`'s modules on the standard library alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.door import door

if TYPE_CHECKING:
    from service.sandboxes.base import (
        HOME,
        PROXY_SOCKET,
        REWARD_JSON,
        REWARD_TXT,
        SOLUTION_DIR,
        VERIFIER_DIR,
        WORKDIR,
        BackgroundProcess,
        Capabilities,
        ExecResult,
        FileEntry,
        OutputCallback,
        OutputStream,
        Reclaimed,
        Sandbox,
        SandboxBackend,
        SandboxRequest,
        Snapshot,
        in_workdir,
    )
    from service.sandboxes.carry import PathCarrier
    from service.sandboxes.deadline import wait_or_kill
    from service.sandboxes.e2b.backend import E2BBackend
    from service.sandboxes.e2b.guard import RetryPolicy
    from service.sandboxes.e2b.template import TemplateBuilds
    from service.sandboxes.internet import InternetAccess
    from service.sandboxes.local.backend import LocalBackend, LocalSandbox
    from service.sandboxes.local.bwrap import SandboxLayout
    from service.sandboxes.local.disk_pool import DiskPool
    from service.sandboxes.local.removal import remove_tree
    from service.sandboxes.output import HeadTailBuffer
    from service.sandboxes.prestart import (
        SETTLE_TIMEOUT_S,
        AgentPlan,
        PrestartedAgent,
        has_warm_agents,
        learn,
        take,
    )
    from service.sandboxes.seal import SYSTEM_TREES, EntryKind, PathState, SystemDiff, SystemSeal

__all__ = [
    "HOME",
    "PROXY_SOCKET",
    "REWARD_JSON",
    "REWARD_TXT",
    "SETTLE_TIMEOUT_S",
    "SOLUTION_DIR",
    "SYSTEM_TREES",
    "VERIFIER_DIR",
    "WORKDIR",
    "AgentPlan",
    "BackgroundProcess",
    "Capabilities",
    "DiskPool",
    "E2BBackend",
    "EntryKind",
    "ExecResult",
    "FileEntry",
    "HeadTailBuffer",
    "InternetAccess",
    "LocalBackend",
    "LocalSandbox",
    "OutputCallback",
    "OutputStream",
    "PathCarrier",
    "PathState",
    "PrestartedAgent",
    "Reclaimed",
    "RetryPolicy",
    "Sandbox",
    "SandboxBackend",
    "SandboxLayout",
    "SandboxRequest",
    "Snapshot",
    "SystemDiff",
    "SystemSeal",
    "TemplateBuilds",
    "has_warm_agents",
    "in_workdir",
    "learn",
    "remove_tree",
    "take",
    "wait_or_kill",
]

__getattr__ = door(__name__)
