"""The domain model: pure pydantic data, no behaviour, no protobuf.

Protobuf classes stay at the gRPC edge (`service.api.convert`); everything
inside the service speaks these types.
"""

from service.models.dialect import Dialect, DialectMode
from service.models.events import (
    AgentOutput,
    AgentOutputKind,
    EventPayload,
    Notice,
    PhaseChanged,
    RolloutEvent,
)
from service.models.group import (
    GROUP_LABEL,
    INFRASTRUCTURE_KINDS,
    Group,
    GroupMember,
    GroupSpec,
    GroupStats,
    GroupStatus,
)
from service.models.model_access import ModelAccess
from service.models.rollout import (
    TERMINAL_STATUSES,
    CommandResult,
    CommandStage,
    ErrorKind,
    Phase,
    PhaseTimings,
    Rollout,
    RolloutError,
    RolloutResult,
    RolloutStatus,
)
from service.models.session import (
    SESSION_AGENT,
    SESSION_LABEL,
    SessionEnding,
    SessionRecord,
    SessionStatus,
)
from service.models.spec import (
    AgentSpec,
    CaptureMode,
    CaptureSpec,
    EndpointSpec,
    HarborTaskSpec,
    NetworkPolicy,
    Resources,
    RewardSource,
    RolloutSpec,
    Sampling,
    SandboxSpec,
    TaskSpec,
    VerifyMode,
)
from service.models.turn import TokenLogprob, ToolCall, Turn, Usage

__all__ = [
    "GROUP_LABEL",
    "INFRASTRUCTURE_KINDS",
    "SESSION_AGENT",
    "SESSION_LABEL",
    "TERMINAL_STATUSES",
    "AgentOutput",
    "AgentOutputKind",
    "AgentSpec",
    "CaptureMode",
    "CaptureSpec",
    "CommandResult",
    "CommandStage",
    "Dialect",
    "DialectMode",
    "EndpointSpec",
    "ErrorKind",
    "EventPayload",
    "Group",
    "GroupMember",
    "GroupSpec",
    "GroupStats",
    "GroupStatus",
    "HarborTaskSpec",
    "ModelAccess",
    "NetworkPolicy",
    "Notice",
    "Phase",
    "PhaseChanged",
    "PhaseTimings",
    "Resources",
    "RewardSource",
    "Rollout",
    "RolloutError",
    "RolloutEvent",
    "RolloutResult",
    "RolloutSpec",
    "RolloutStatus",
    "Sampling",
    "SandboxSpec",
    "SessionEnding",
    "SessionRecord",
    "SessionStatus",
    "TaskSpec",
    "TokenLogprob",
    "ToolCall",
    "Turn",
    "Usage",
    "VerifyMode",
]
