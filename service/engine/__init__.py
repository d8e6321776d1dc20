"""The engine: the phase machine (`lifecycle`), the manager (`manager`), the event log and
its fan-out (`events`), model access (`model_access`, `model_calls`), groups (`groups/`) and
sessions (`sessions/`); what the API and the server use of it is exported here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.door import door

if TYPE_CHECKING:
    from service.engine.events import Backlog, EventHub
    from service.engine.groups.manager import GroupManager
    from service.engine.manager import RolloutManager
    from service.engine.model_access import ModelRouter
    from service.engine.model_calls import CallSelector
    from service.engine.sessions import (
        CommandRequest,
        ExecDone,
        OpenRequest,
        OutputChunk,
        SessionManager,
        session_status,
    )
    from service.engine.validation import label_violations, text_violations

__all__ = [
    "Backlog",
    "CallSelector",
    "CommandRequest",
    "EventHub",
    "ExecDone",
    "GroupManager",
    "ModelRouter",
    "OpenRequest",
    "OutputChunk",
    "RolloutManager",
    "SessionManager",
    "label_violations",
    "session_status",
    "text_violations",
]

__getattr__ = door(__name__)
