import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResultView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESULT_VIEW_UNSPECIFIED: _ClassVar[ResultView]
    RESULT_VIEW_FULL: _ClassVar[ResultView]
    RESULT_VIEW_SLIM: _ClassVar[ResultView]

class VerifyMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERIFY_MODE_UNSPECIFIED: _ClassVar[VerifyMode]
    VERIFY_MODE_AUTO: _ClassVar[VerifyMode]
    VERIFY_MODE_FRESH: _ClassVar[VerifyMode]
    VERIFY_MODE_IN_PLACE: _ClassVar[VerifyMode]

class RewardSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REWARD_SOURCE_UNSPECIFIED: _ClassVar[RewardSource]
    REWARD_SOURCE_AUTO: _ClassVar[RewardSource]
    REWARD_SOURCE_FILE: _ClassVar[RewardSource]
    REWARD_SOURCE_COMMANDS: _ClassVar[RewardSource]

class DialectMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DIALECT_MODE_UNSPECIFIED: _ClassVar[DialectMode]
    DIALECT_MODE_TRANSLATED: _ClassVar[DialectMode]
    DIALECT_MODE_NATIVE: _ClassVar[DialectMode]

class Dialect(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DIALECT_UNSPECIFIED: _ClassVar[Dialect]
    DIALECT_CHAT_COMPLETIONS: _ClassVar[Dialect]
    DIALECT_RESPONSES: _ClassVar[Dialect]
    DIALECT_MESSAGES: _ClassVar[Dialect]

class NetworkPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NETWORK_POLICY_UNSPECIFIED: _ClassVar[NetworkPolicy]
    NETWORK_POLICY_NONE: _ClassVar[NetworkPolicy]
    NETWORK_POLICY_FULL: _ClassVar[NetworkPolicy]

class CaptureMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CAPTURE_MODE_UNSPECIFIED: _ClassVar[CaptureMode]
    CAPTURE_MODE_TRANSPARENT_PROXY: _ClassVar[CaptureMode]
    CAPTURE_MODE_BLACK_BOX: _ClassVar[CaptureMode]

class RolloutStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLLOUT_STATUS_UNSPECIFIED: _ClassVar[RolloutStatus]
    ROLLOUT_STATUS_QUEUED: _ClassVar[RolloutStatus]
    ROLLOUT_STATUS_RUNNING: _ClassVar[RolloutStatus]
    ROLLOUT_STATUS_SUCCEEDED: _ClassVar[RolloutStatus]
    ROLLOUT_STATUS_FAILED: _ClassVar[RolloutStatus]
    ROLLOUT_STATUS_CANCELLED: _ClassVar[RolloutStatus]
    ROLLOUT_STATUS_TIMED_OUT: _ClassVar[RolloutStatus]

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PHASE_UNSPECIFIED: _ClassVar[Phase]
    PHASE_QUEUED: _ClassVar[Phase]
    PHASE_CREATING_SANDBOX: _ClassVar[Phase]
    PHASE_PREPARING_AGENT: _ClassVar[Phase]
    PHASE_SETUP: _ClassVar[Phase]
    PHASE_AGENT: _ClassVar[Phase]
    PHASE_VERIFYING: _ClassVar[Phase]
    PHASE_COLLECTING: _ClassVar[Phase]
    PHASE_TEARDOWN: _ClassVar[Phase]
    PHASE_DONE: _ClassVar[Phase]

class ErrorKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_KIND_UNSPECIFIED: _ClassVar[ErrorKind]
    ERROR_KIND_INVALID_SPEC: _ClassVar[ErrorKind]
    ERROR_KIND_SANDBOX: _ClassVar[ErrorKind]
    ERROR_KIND_SETUP: _ClassVar[ErrorKind]
    ERROR_KIND_AGENT: _ClassVar[ErrorKind]
    ERROR_KIND_AGENT_TIMEOUT: _ClassVar[ErrorKind]
    ERROR_KIND_UPSTREAM_LLM: _ClassVar[ErrorKind]
    ERROR_KIND_VERIFIER: _ClassVar[ErrorKind]
    ERROR_KIND_CANCELLED: _ClassVar[ErrorKind]
    ERROR_KIND_INTERNAL: _ClassVar[ErrorKind]
    ERROR_KIND_AGENT_INSTALL: _ClassVar[ErrorKind]
    ERROR_KIND_TAMPERED: _ClassVar[ErrorKind]
    ERROR_KIND_POLICY_STALE: _ClassVar[ErrorKind]

class CommandStage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMMAND_STAGE_UNSPECIFIED: _ClassVar[CommandStage]
    COMMAND_STAGE_SETUP: _ClassVar[CommandStage]
    COMMAND_STAGE_VERIFY: _ClassVar[CommandStage]
    COMMAND_STAGE_SESSION: _ClassVar[CommandStage]

class AgentOutputKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AGENT_OUTPUT_KIND_UNSPECIFIED: _ClassVar[AgentOutputKind]
    AGENT_OUTPUT_KIND_STDOUT: _ClassVar[AgentOutputKind]
    AGENT_OUTPUT_KIND_STDERR: _ClassVar[AgentOutputKind]
    AGENT_OUTPUT_KIND_TEXT: _ClassVar[AgentOutputKind]
    AGENT_OUTPUT_KIND_TOOL_CALL: _ClassVar[AgentOutputKind]
    AGENT_OUTPUT_KIND_ERROR: _ClassVar[AgentOutputKind]
    AGENT_OUTPUT_KIND_TRUNCATED: _ClassVar[AgentOutputKind]

class GroupStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GROUP_STATUS_UNSPECIFIED: _ClassVar[GroupStatus]
    GROUP_STATUS_RUNNING: _ClassVar[GroupStatus]
    GROUP_STATUS_COMPLETED: _ClassVar[GroupStatus]
    GROUP_STATUS_FAILED: _ClassVar[GroupStatus]
    GROUP_STATUS_CANCELLED: _ClassVar[GroupStatus]
    GROUP_STATUS_TIMED_OUT: _ClassVar[GroupStatus]

class SessionStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_STATUS_UNSPECIFIED: _ClassVar[SessionStatus]
    SESSION_STATUS_OPENING: _ClassVar[SessionStatus]
    SESSION_STATUS_READY: _ClassVar[SessionStatus]
    SESSION_STATUS_VERIFYING: _ClassVar[SessionStatus]
    SESSION_STATUS_CLOSING: _ClassVar[SessionStatus]
    SESSION_STATUS_VERIFIED: _ClassVar[SessionStatus]
    SESSION_STATUS_CLOSED: _ClassVar[SessionStatus]
    SESSION_STATUS_EXPIRED: _ClassVar[SessionStatus]
    SESSION_STATUS_FAILED: _ClassVar[SessionStatus]

class ExecStream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXEC_STREAM_UNSPECIFIED: _ClassVar[ExecStream]
    EXEC_STREAM_STDOUT: _ClassVar[ExecStream]
    EXEC_STREAM_STDERR: _ClassVar[ExecStream]
RESULT_VIEW_UNSPECIFIED: ResultView
RESULT_VIEW_FULL: ResultView
RESULT_VIEW_SLIM: ResultView
VERIFY_MODE_UNSPECIFIED: VerifyMode
VERIFY_MODE_AUTO: VerifyMode
VERIFY_MODE_FRESH: VerifyMode
VERIFY_MODE_IN_PLACE: VerifyMode
REWARD_SOURCE_UNSPECIFIED: RewardSource
REWARD_SOURCE_AUTO: RewardSource
REWARD_SOURCE_FILE: RewardSource
REWARD_SOURCE_COMMANDS: RewardSource
DIALECT_MODE_UNSPECIFIED: DialectMode
DIALECT_MODE_TRANSLATED: DialectMode
DIALECT_MODE_NATIVE: DialectMode
DIALECT_UNSPECIFIED: Dialect
DIALECT_CHAT_COMPLETIONS: Dialect
DIALECT_RESPONSES: Dialect
DIALECT_MESSAGES: Dialect
NETWORK_POLICY_UNSPECIFIED: NetworkPolicy
NETWORK_POLICY_NONE: NetworkPolicy
NETWORK_POLICY_FULL: NetworkPolicy
CAPTURE_MODE_UNSPECIFIED: CaptureMode
CAPTURE_MODE_TRANSPARENT_PROXY: CaptureMode
CAPTURE_MODE_BLACK_BOX: CaptureMode
ROLLOUT_STATUS_UNSPECIFIED: RolloutStatus
ROLLOUT_STATUS_QUEUED: RolloutStatus
ROLLOUT_STATUS_RUNNING: RolloutStatus
ROLLOUT_STATUS_SUCCEEDED: RolloutStatus
ROLLOUT_STATUS_FAILED: RolloutStatus
ROLLOUT_STATUS_CANCELLED: RolloutStatus
ROLLOUT_STATUS_TIMED_OUT: RolloutStatus
PHASE_UNSPECIFIED: Phase
PHASE_QUEUED: Phase
PHASE_CREATING_SANDBOX: Phase
PHASE_PREPARING_AGENT: Phase
PHASE_SETUP: Phase
PHASE_AGENT: Phase
PHASE_VERIFYING: Phase
PHASE_COLLECTING: Phase
PHASE_TEARDOWN: Phase
PHASE_DONE: Phase
ERROR_KIND_UNSPECIFIED: ErrorKind
ERROR_KIND_INVALID_SPEC: ErrorKind
ERROR_KIND_SANDBOX: ErrorKind
ERROR_KIND_SETUP: ErrorKind
ERROR_KIND_AGENT: ErrorKind
ERROR_KIND_AGENT_TIMEOUT: ErrorKind
ERROR_KIND_UPSTREAM_LLM: ErrorKind
ERROR_KIND_VERIFIER: ErrorKind
ERROR_KIND_CANCELLED: ErrorKind
ERROR_KIND_INTERNAL: ErrorKind
ERROR_KIND_AGENT_INSTALL: ErrorKind
ERROR_KIND_TAMPERED: ErrorKind
ERROR_KIND_POLICY_STALE: ErrorKind
COMMAND_STAGE_UNSPECIFIED: CommandStage
COMMAND_STAGE_SETUP: CommandStage
COMMAND_STAGE_VERIFY: CommandStage
COMMAND_STAGE_SESSION: CommandStage
AGENT_OUTPUT_KIND_UNSPECIFIED: AgentOutputKind
AGENT_OUTPUT_KIND_STDOUT: AgentOutputKind
AGENT_OUTPUT_KIND_STDERR: AgentOutputKind
AGENT_OUTPUT_KIND_TEXT: AgentOutputKind
AGENT_OUTPUT_KIND_TOOL_CALL: AgentOutputKind
AGENT_OUTPUT_KIND_ERROR: AgentOutputKind
AGENT_OUTPUT_KIND_TRUNCATED: AgentOutputKind
GROUP_STATUS_UNSPECIFIED: GroupStatus
GROUP_STATUS_RUNNING: GroupStatus
GROUP_STATUS_COMPLETED: GroupStatus
GROUP_STATUS_FAILED: GroupStatus
GROUP_STATUS_CANCELLED: GroupStatus
GROUP_STATUS_TIMED_OUT: GroupStatus
SESSION_STATUS_UNSPECIFIED: SessionStatus
SESSION_STATUS_OPENING: SessionStatus
SESSION_STATUS_READY: SessionStatus
SESSION_STATUS_VERIFYING: SessionStatus
SESSION_STATUS_CLOSING: SessionStatus
SESSION_STATUS_VERIFIED: SessionStatus
SESSION_STATUS_CLOSED: SessionStatus
SESSION_STATUS_EXPIRED: SessionStatus
SESSION_STATUS_FAILED: SessionStatus
EXEC_STREAM_UNSPECIFIED: ExecStream
EXEC_STREAM_STDOUT: ExecStream
EXEC_STREAM_STDERR: ExecStream

class RunRolloutRequest(_message.Message):
    __slots__ = ("spec", "view")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    spec: RolloutSpec
    view: ResultView
    def __init__(self, spec: _Optional[_Union[RolloutSpec, _Mapping]] = ..., view: _Optional[_Union[ResultView, str]] = ...) -> None: ...

class RunRolloutResponse(_message.Message):
    __slots__ = ("rollout",)
    ROLLOUT_FIELD_NUMBER: _ClassVar[int]
    rollout: Rollout
    def __init__(self, rollout: _Optional[_Union[Rollout, _Mapping]] = ...) -> None: ...

class StartRolloutRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: RolloutSpec
    def __init__(self, spec: _Optional[_Union[RolloutSpec, _Mapping]] = ...) -> None: ...

class StartRolloutResponse(_message.Message):
    __slots__ = ("rollout",)
    ROLLOUT_FIELD_NUMBER: _ClassVar[int]
    rollout: Rollout
    def __init__(self, rollout: _Optional[_Union[Rollout, _Mapping]] = ...) -> None: ...

class WatchRolloutRequest(_message.Message):
    __slots__ = ("rollout_id", "after_seq", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    after_seq: int
    labels: _containers.ScalarMap[str, str]
    def __init__(self, rollout_id: _Optional[str] = ..., after_seq: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class WatchRolloutResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: RolloutEvent
    def __init__(self, event: _Optional[_Union[RolloutEvent, _Mapping]] = ...) -> None: ...

class GetRolloutRequest(_message.Message):
    __slots__ = ("rollout_id", "view")
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    view: ResultView
    def __init__(self, rollout_id: _Optional[str] = ..., view: _Optional[_Union[ResultView, str]] = ...) -> None: ...

class GetRolloutResponse(_message.Message):
    __slots__ = ("rollout",)
    ROLLOUT_FIELD_NUMBER: _ClassVar[int]
    rollout: Rollout
    def __init__(self, rollout: _Optional[_Union[Rollout, _Mapping]] = ...) -> None: ...

class ListRolloutsRequest(_message.Message):
    __slots__ = ("labels", "statuses", "page_size", "page_token", "view", "max_page_bytes")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    MAX_PAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    statuses: _containers.RepeatedScalarFieldContainer[RolloutStatus]
    page_size: int
    page_token: str
    view: ResultView
    max_page_bytes: int
    def __init__(self, labels: _Optional[_Mapping[str, str]] = ..., statuses: _Optional[_Iterable[_Union[RolloutStatus, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., view: _Optional[_Union[ResultView, str]] = ..., max_page_bytes: _Optional[int] = ...) -> None: ...

class ListRolloutsResponse(_message.Message):
    __slots__ = ("rollouts", "next_page_token")
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    rollouts: _containers.RepeatedCompositeFieldContainer[Rollout]
    next_page_token: str
    def __init__(self, rollouts: _Optional[_Iterable[_Union[Rollout, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelRolloutRequest(_message.Message):
    __slots__ = ("rollout_id", "reason")
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    reason: str
    def __init__(self, rollout_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelRolloutResponse(_message.Message):
    __slots__ = ("rollout",)
    ROLLOUT_FIELD_NUMBER: _ClassVar[int]
    rollout: Rollout
    def __init__(self, rollout: _Optional[_Union[Rollout, _Mapping]] = ...) -> None: ...

class RolloutSpec(_message.Message):
    __slots__ = ("task_id", "task", "agent", "endpoint", "sandbox", "capture", "agent_timeout", "labels", "request_id", "command_timeout", "verify_timeout", "harbor_task", "sampling", "max_policy_lag")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_FIELD_NUMBER: _ClassVar[int]
    AGENT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    VERIFY_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    HARBOR_TASK_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    MAX_POLICY_LAG_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    task: Task
    agent: Agent
    endpoint: Endpoint
    sandbox: SandboxSpec
    capture: Capture
    agent_timeout: _duration_pb2.Duration
    labels: _containers.ScalarMap[str, str]
    request_id: str
    command_timeout: _duration_pb2.Duration
    verify_timeout: _duration_pb2.Duration
    harbor_task: HarborTask
    sampling: Sampling
    max_policy_lag: int
    def __init__(self, task_id: _Optional[str] = ..., task: _Optional[_Union[Task, _Mapping]] = ..., agent: _Optional[_Union[Agent, _Mapping]] = ..., endpoint: _Optional[_Union[Endpoint, _Mapping]] = ..., sandbox: _Optional[_Union[SandboxSpec, _Mapping]] = ..., capture: _Optional[_Union[Capture, _Mapping]] = ..., agent_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ..., command_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., verify_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., harbor_task: _Optional[_Union[HarborTask, _Mapping]] = ..., sampling: _Optional[_Union[Sampling, _Mapping]] = ..., max_policy_lag: _Optional[int] = ...) -> None: ...

class Sampling(_message.Message):
    __slots__ = ("seed", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
    SEED_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    seed: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    presence_penalty: float
    frequency_penalty: float
    repetition_penalty: float
    def __init__(self, seed: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., min_p: _Optional[float] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., repetition_penalty: _Optional[float] = ...) -> None: ...

class HarborTask(_message.Message):
    __slots__ = ("path", "archive", "digest")
    PATH_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    path: str
    archive: bytes
    digest: str
    def __init__(self, path: _Optional[str] = ..., archive: _Optional[bytes] = ..., digest: _Optional[str] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("instruction", "setup", "verify", "files", "verifier_files", "reward_source", "reward_key", "env", "file_modes", "solution_files", "verifier_env", "solution_env", "workdir", "verify_mode", "carried_paths")
    class FilesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    class VerifierFilesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class FileModesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class SolutionFilesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    class VerifierEnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class SolutionEnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    INSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    SETUP_FIELD_NUMBER: _ClassVar[int]
    VERIFY_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_FILES_FIELD_NUMBER: _ClassVar[int]
    REWARD_SOURCE_FIELD_NUMBER: _ClassVar[int]
    REWARD_KEY_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    FILE_MODES_FIELD_NUMBER: _ClassVar[int]
    SOLUTION_FILES_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_ENV_FIELD_NUMBER: _ClassVar[int]
    SOLUTION_ENV_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    VERIFY_MODE_FIELD_NUMBER: _ClassVar[int]
    CARRIED_PATHS_FIELD_NUMBER: _ClassVar[int]
    instruction: str
    setup: _containers.RepeatedScalarFieldContainer[str]
    verify: _containers.RepeatedScalarFieldContainer[str]
    files: _containers.ScalarMap[str, bytes]
    verifier_files: _containers.ScalarMap[str, bytes]
    reward_source: RewardSource
    reward_key: str
    env: _containers.ScalarMap[str, str]
    file_modes: _containers.ScalarMap[str, str]
    solution_files: _containers.ScalarMap[str, bytes]
    verifier_env: _containers.ScalarMap[str, str]
    solution_env: _containers.ScalarMap[str, str]
    workdir: str
    verify_mode: VerifyMode
    carried_paths: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, instruction: _Optional[str] = ..., setup: _Optional[_Iterable[str]] = ..., verify: _Optional[_Iterable[str]] = ..., files: _Optional[_Mapping[str, bytes]] = ..., verifier_files: _Optional[_Mapping[str, bytes]] = ..., reward_source: _Optional[_Union[RewardSource, str]] = ..., reward_key: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., file_modes: _Optional[_Mapping[str, str]] = ..., solution_files: _Optional[_Mapping[str, bytes]] = ..., verifier_env: _Optional[_Mapping[str, str]] = ..., solution_env: _Optional[_Mapping[str, str]] = ..., workdir: _Optional[str] = ..., verify_mode: _Optional[_Union[VerifyMode, str]] = ..., carried_paths: _Optional[_Iterable[str]] = ...) -> None: ...

class Agent(_message.Message):
    __slots__ = ("name", "command", "options")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    command: str
    options: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., command: _Optional[str] = ..., options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Endpoint(_message.Message):
    __slots__ = ("kind", "base_url", "api_key", "model", "dialect_mode")
    KIND_FIELD_NUMBER: _ClassVar[int]
    BASE_URL_FIELD_NUMBER: _ClassVar[int]
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DIALECT_MODE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    base_url: str
    api_key: str
    model: str
    dialect_mode: DialectMode
    def __init__(self, kind: _Optional[str] = ..., base_url: _Optional[str] = ..., api_key: _Optional[str] = ..., model: _Optional[str] = ..., dialect_mode: _Optional[_Union[DialectMode, str]] = ...) -> None: ...

class SandboxSpec(_message.Message):
    __slots__ = ("backend", "template", "network", "resources", "image", "verifier_network")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_NETWORK_FIELD_NUMBER: _ClassVar[int]
    backend: str
    template: str
    network: NetworkPolicy
    resources: Resources
    image: str
    verifier_network: NetworkPolicy
    def __init__(self, backend: _Optional[str] = ..., template: _Optional[str] = ..., network: _Optional[_Union[NetworkPolicy, str]] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., image: _Optional[str] = ..., verifier_network: _Optional[_Union[NetworkPolicy, str]] = ...) -> None: ...

class Resources(_message.Message):
    __slots__ = ("memory_mb", "cpu_seconds", "max_processes", "max_file_size_mb", "cpu_count", "disk_mb")
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_PROCESSES_FIELD_NUMBER: _ClassVar[int]
    MAX_FILE_SIZE_MB_FIELD_NUMBER: _ClassVar[int]
    CPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    DISK_MB_FIELD_NUMBER: _ClassVar[int]
    memory_mb: int
    cpu_seconds: int
    max_processes: int
    max_file_size_mb: int
    cpu_count: int
    disk_mb: int
    def __init__(self, memory_mb: _Optional[int] = ..., cpu_seconds: _Optional[int] = ..., max_processes: _Optional[int] = ..., max_file_size_mb: _Optional[int] = ..., cpu_count: _Optional[int] = ..., disk_mb: _Optional[int] = ...) -> None: ...

class Capture(_message.Message):
    __slots__ = ("mode", "max_tokens_cap", "top_logprobs", "disable_thinking")
    MODE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_CAP_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    DISABLE_THINKING_FIELD_NUMBER: _ClassVar[int]
    mode: CaptureMode
    max_tokens_cap: int
    top_logprobs: int
    disable_thinking: bool
    def __init__(self, mode: _Optional[_Union[CaptureMode, str]] = ..., max_tokens_cap: _Optional[int] = ..., top_logprobs: _Optional[int] = ..., disable_thinking: _Optional[bool] = ...) -> None: ...

class Rollout(_message.Message):
    __slots__ = ("id", "spec", "status", "phase", "result", "create_time", "start_time", "finish_time", "tenant", "group_id", "member_index")
    ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    spec: RolloutSpec
    status: RolloutStatus
    phase: Phase
    result: RolloutResult
    create_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    tenant: str
    group_id: str
    member_index: int
    def __init__(self, id: _Optional[str] = ..., spec: _Optional[_Union[RolloutSpec, _Mapping]] = ..., status: _Optional[_Union[RolloutStatus, str]] = ..., phase: _Optional[_Union[Phase, str]] = ..., result: _Optional[_Union[RolloutResult, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tenant: _Optional[str] = ..., group_id: _Optional[str] = ..., member_index: _Optional[int] = ...) -> None: ...

class RolloutResult(_message.Message):
    __slots__ = ("reward", "metrics", "agent_exit_code", "setup_results", "verify_results", "turns", "files", "agent_log_tail", "error", "timings", "sandbox_id", "turn_count", "files_omitted", "trainable_calls", "trainable_calls_failed", "reward_key", "policy_version_min", "policy_version_max")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class FilesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    REWARD_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    AGENT_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SETUP_RESULTS_FIELD_NUMBER: _ClassVar[int]
    VERIFY_RESULTS_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    AGENT_LOG_TAIL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_COUNT_FIELD_NUMBER: _ClassVar[int]
    FILES_OMITTED_FIELD_NUMBER: _ClassVar[int]
    TRAINABLE_CALLS_FIELD_NUMBER: _ClassVar[int]
    TRAINABLE_CALLS_FAILED_FIELD_NUMBER: _ClassVar[int]
    REWARD_KEY_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_MIN_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_MAX_FIELD_NUMBER: _ClassVar[int]
    reward: float
    metrics: _containers.ScalarMap[str, float]
    agent_exit_code: int
    setup_results: _containers.RepeatedCompositeFieldContainer[CommandResult]
    verify_results: _containers.RepeatedCompositeFieldContainer[CommandResult]
    turns: _containers.RepeatedCompositeFieldContainer[Turn]
    files: _containers.ScalarMap[str, bytes]
    agent_log_tail: str
    error: Error
    timings: PhaseTimings
    sandbox_id: str
    turn_count: int
    files_omitted: _containers.RepeatedScalarFieldContainer[str]
    trainable_calls: int
    trainable_calls_failed: int
    reward_key: str
    policy_version_min: int
    policy_version_max: int
    def __init__(self, reward: _Optional[float] = ..., metrics: _Optional[_Mapping[str, float]] = ..., agent_exit_code: _Optional[int] = ..., setup_results: _Optional[_Iterable[_Union[CommandResult, _Mapping]]] = ..., verify_results: _Optional[_Iterable[_Union[CommandResult, _Mapping]]] = ..., turns: _Optional[_Iterable[_Union[Turn, _Mapping]]] = ..., files: _Optional[_Mapping[str, bytes]] = ..., agent_log_tail: _Optional[str] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., timings: _Optional[_Union[PhaseTimings, _Mapping]] = ..., sandbox_id: _Optional[str] = ..., turn_count: _Optional[int] = ..., files_omitted: _Optional[_Iterable[str]] = ..., trainable_calls: _Optional[int] = ..., trainable_calls_failed: _Optional[int] = ..., reward_key: _Optional[str] = ..., policy_version_min: _Optional[int] = ..., policy_version_max: _Optional[int] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("kind", "message")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    kind: ErrorKind
    message: str
    def __init__(self, kind: _Optional[_Union[ErrorKind, str]] = ..., message: _Optional[str] = ...) -> None: ...

class PhaseTimings(_message.Message):
    __slots__ = ("queued", "creating_sandbox", "preparing_agent", "setup", "agent", "verifying", "collecting", "teardown", "total", "paused")
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    CREATING_SANDBOX_FIELD_NUMBER: _ClassVar[int]
    PREPARING_AGENT_FIELD_NUMBER: _ClassVar[int]
    SETUP_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    VERIFYING_FIELD_NUMBER: _ClassVar[int]
    COLLECTING_FIELD_NUMBER: _ClassVar[int]
    TEARDOWN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    queued: _duration_pb2.Duration
    creating_sandbox: _duration_pb2.Duration
    preparing_agent: _duration_pb2.Duration
    setup: _duration_pb2.Duration
    agent: _duration_pb2.Duration
    verifying: _duration_pb2.Duration
    collecting: _duration_pb2.Duration
    teardown: _duration_pb2.Duration
    total: _duration_pb2.Duration
    paused: _duration_pb2.Duration
    def __init__(self, queued: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., creating_sandbox: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., preparing_agent: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., setup: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., agent: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., verifying: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., collecting: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., teardown: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., total: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., paused: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CommandResult(_message.Message):
    __slots__ = ("stage", "index", "command", "exit_code", "stdout", "stderr", "stdout_bytes", "stderr_bytes", "duration", "timed_out", "display_command")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDOUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDERR_BYTES_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_COMMAND_FIELD_NUMBER: _ClassVar[int]
    stage: CommandStage
    index: int
    command: str
    exit_code: int
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    duration: _duration_pb2.Duration
    timed_out: bool
    display_command: str
    def __init__(self, stage: _Optional[_Union[CommandStage, str]] = ..., index: _Optional[int] = ..., command: _Optional[str] = ..., exit_code: _Optional[int] = ..., stdout: _Optional[str] = ..., stderr: _Optional[str] = ..., stdout_bytes: _Optional[int] = ..., stderr_bytes: _Optional[int] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., timed_out: _Optional[bool] = ..., display_command: _Optional[str] = ...) -> None: ...

class Turn(_message.Message):
    __slots__ = ("index", "trainable", "requested_model", "request_messages", "request_message_offset", "tools", "tools_hash", "completion_text", "reasoning_text", "tool_calls", "finish_reason", "prompt_token_ids", "completion_token_ids", "logprobs", "completion_tokens", "top_logprobs", "token_ids_present", "usage", "latency", "time_to_first_token", "upstream_status", "upstream_error", "stream", "start_time", "incomplete", "logprobs_present", "usage_counted", "unparsed", "raw_request", "dialect", "translated", "body_cut", "body_bytes_dropped", "policy_version_start", "policy_version_end", "upstream_weight_version", "paused", "sampling", "sampling_stripped")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TRAINABLE_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_MESSAGE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_HASH_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TEXT_FIELD_NUMBER: _ClassVar[int]
    REASONING_TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_PRESENT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    LATENCY_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_FIRST_TOKEN_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_STATUS_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_ERROR_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    INCOMPLETE_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_PRESENT_FIELD_NUMBER: _ClassVar[int]
    USAGE_COUNTED_FIELD_NUMBER: _ClassVar[int]
    UNPARSED_FIELD_NUMBER: _ClassVar[int]
    RAW_REQUEST_FIELD_NUMBER: _ClassVar[int]
    DIALECT_FIELD_NUMBER: _ClassVar[int]
    TRANSLATED_FIELD_NUMBER: _ClassVar[int]
    BODY_CUT_FIELD_NUMBER: _ClassVar[int]
    BODY_BYTES_DROPPED_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_START_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_END_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_STRIPPED_FIELD_NUMBER: _ClassVar[int]
    index: int
    trainable: bool
    requested_model: str
    request_messages: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Struct]
    request_message_offset: int
    tools: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Struct]
    tools_hash: str
    completion_text: str
    reasoning_text: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    finish_reason: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    completion_token_ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedScalarFieldContainer[float]
    completion_tokens: _containers.RepeatedScalarFieldContainer[str]
    top_logprobs: _containers.RepeatedCompositeFieldContainer[TopLogprobs]
    token_ids_present: bool
    usage: Usage
    latency: _duration_pb2.Duration
    time_to_first_token: _duration_pb2.Duration
    upstream_status: int
    upstream_error: str
    stream: bool
    start_time: _timestamp_pb2.Timestamp
    incomplete: bool
    logprobs_present: bool
    usage_counted: bool
    unparsed: bool
    raw_request: str
    dialect: Dialect
    translated: bool
    body_cut: bool
    body_bytes_dropped: int
    policy_version_start: int
    policy_version_end: int
    upstream_weight_version: str
    paused: _duration_pb2.Duration
    sampling: Sampling
    sampling_stripped: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, index: _Optional[int] = ..., trainable: _Optional[bool] = ..., requested_model: _Optional[str] = ..., request_messages: _Optional[_Iterable[_Union[_struct_pb2.Struct, _Mapping]]] = ..., request_message_offset: _Optional[int] = ..., tools: _Optional[_Iterable[_Union[_struct_pb2.Struct, _Mapping]]] = ..., tools_hash: _Optional[str] = ..., completion_text: _Optional[str] = ..., reasoning_text: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., finish_reason: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., completion_token_ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[float]] = ..., completion_tokens: _Optional[_Iterable[str]] = ..., top_logprobs: _Optional[_Iterable[_Union[TopLogprobs, _Mapping]]] = ..., token_ids_present: _Optional[bool] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., latency: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., time_to_first_token: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., upstream_status: _Optional[int] = ..., upstream_error: _Optional[str] = ..., stream: _Optional[bool] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., incomplete: _Optional[bool] = ..., logprobs_present: _Optional[bool] = ..., usage_counted: _Optional[bool] = ..., unparsed: _Optional[bool] = ..., raw_request: _Optional[str] = ..., dialect: _Optional[_Union[Dialect, str]] = ..., translated: _Optional[bool] = ..., body_cut: _Optional[bool] = ..., body_bytes_dropped: _Optional[int] = ..., policy_version_start: _Optional[int] = ..., policy_version_end: _Optional[int] = ..., upstream_weight_version: _Optional[str] = ..., paused: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., sampling: _Optional[_Union[Sampling, _Mapping]] = ..., sampling_stripped: _Optional[_Iterable[str]] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class TopLogprobs(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    def __init__(self, entries: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token", "token_id", "logprob")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    token: str
    token_id: int
    logprob: float
    def __init__(self, token: _Optional[str] = ..., token_id: _Optional[int] = ..., logprob: _Optional[float] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "total_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ...) -> None: ...

class RolloutEvent(_message.Message):
    __slots__ = ("rollout_id", "seq", "time", "phase", "command", "turn", "output", "finished", "notice")
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    NOTICE_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    seq: int
    time: _timestamp_pb2.Timestamp
    phase: PhaseChanged
    command: CommandResult
    turn: Turn
    output: AgentOutput
    finished: Rollout
    notice: Notice
    def __init__(self, rollout_id: _Optional[str] = ..., seq: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., phase: _Optional[_Union[PhaseChanged, _Mapping]] = ..., command: _Optional[_Union[CommandResult, _Mapping]] = ..., turn: _Optional[_Union[Turn, _Mapping]] = ..., output: _Optional[_Union[AgentOutput, _Mapping]] = ..., finished: _Optional[_Union[Rollout, _Mapping]] = ..., notice: _Optional[_Union[Notice, _Mapping]] = ...) -> None: ...

class Notice(_message.Message):
    __slots__ = ("topic", "message")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    message: str
    def __init__(self, topic: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class PhaseChanged(_message.Message):
    __slots__ = ("phase", "status", "message")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    phase: Phase
    status: RolloutStatus
    message: str
    def __init__(self, phase: _Optional[_Union[Phase, str]] = ..., status: _Optional[_Union[RolloutStatus, str]] = ..., message: _Optional[str] = ...) -> None: ...

class AgentOutput(_message.Message):
    __slots__ = ("kind", "text", "tool_name")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    kind: AgentOutputKind
    text: str
    tool_name: str
    def __init__(self, kind: _Optional[_Union[AgentOutputKind, str]] = ..., text: _Optional[str] = ..., tool_name: _Optional[str] = ...) -> None: ...

class GroupSpec(_message.Message):
    __slots__ = ("spec", "n", "min_complete", "max_refills", "deadline")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    MIN_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    MAX_REFILLS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    spec: RolloutSpec
    n: int
    min_complete: int
    max_refills: int
    deadline: _duration_pb2.Duration
    def __init__(self, spec: _Optional[_Union[RolloutSpec, _Mapping]] = ..., n: _Optional[int] = ..., min_complete: _Optional[int] = ..., max_refills: _Optional[int] = ..., deadline: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Group(_message.Message):
    __slots__ = ("id", "spec", "status", "members", "stats", "error", "create_time", "finish_time", "tenant", "template_setups")
    ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_SETUPS_FIELD_NUMBER: _ClassVar[int]
    id: str
    spec: GroupSpec
    status: GroupStatus
    members: _containers.RepeatedCompositeFieldContainer[GroupMember]
    stats: GroupStats
    error: Error
    create_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    tenant: str
    template_setups: int
    def __init__(self, id: _Optional[str] = ..., spec: _Optional[_Union[GroupSpec, _Mapping]] = ..., status: _Optional[_Union[GroupStatus, str]] = ..., members: _Optional[_Iterable[_Union[GroupMember, _Mapping]]] = ..., stats: _Optional[_Union[GroupStats, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tenant: _Optional[str] = ..., template_setups: _Optional[int] = ...) -> None: ...

class ModelCallSelector(_message.Message):
    __slots__ = ("endpoint", "labels")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    endpoint: EndpointSelector
    labels: LabelSelector
    def __init__(self, endpoint: _Optional[_Union[EndpointSelector, _Mapping]] = ..., labels: _Optional[_Union[LabelSelector, _Mapping]] = ...) -> None: ...

class EndpointSelector(_message.Message):
    __slots__ = ("base_url", "model")
    BASE_URL_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    base_url: str
    model: str
    def __init__(self, base_url: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class LabelSelector(_message.Message):
    __slots__ = ("labels",)
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    def __init__(self, labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SetPolicyVersionRequest(_message.Message):
    __slots__ = ("selector", "version")
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    selector: ModelCallSelector
    version: int
    def __init__(self, selector: _Optional[_Union[ModelCallSelector, _Mapping]] = ..., version: _Optional[int] = ...) -> None: ...

class SetPolicyVersionResponse(_message.Message):
    __slots__ = ("rollouts",)
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    rollouts: int
    def __init__(self, rollouts: _Optional[int] = ...) -> None: ...

class PauseModelCallsRequest(_message.Message):
    __slots__ = ("selector", "abort_in_flight")
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    ABORT_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    selector: ModelCallSelector
    abort_in_flight: bool
    def __init__(self, selector: _Optional[_Union[ModelCallSelector, _Mapping]] = ..., abort_in_flight: _Optional[bool] = ...) -> None: ...

class PauseModelCallsResponse(_message.Message):
    __slots__ = ("rollouts", "calls_finished", "calls_aborted")
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    CALLS_FINISHED_FIELD_NUMBER: _ClassVar[int]
    CALLS_ABORTED_FIELD_NUMBER: _ClassVar[int]
    rollouts: int
    calls_finished: int
    calls_aborted: int
    def __init__(self, rollouts: _Optional[int] = ..., calls_finished: _Optional[int] = ..., calls_aborted: _Optional[int] = ...) -> None: ...

class ResumeModelCallsRequest(_message.Message):
    __slots__ = ("selector",)
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    selector: ModelCallSelector
    def __init__(self, selector: _Optional[_Union[ModelCallSelector, _Mapping]] = ...) -> None: ...

class ResumeModelCallsResponse(_message.Message):
    __slots__ = ("rollouts", "calls_released")
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    CALLS_RELEASED_FIELD_NUMBER: _ClassVar[int]
    rollouts: int
    calls_released: int
    def __init__(self, rollouts: _Optional[int] = ..., calls_released: _Optional[int] = ...) -> None: ...

class GroupMember(_message.Message):
    __slots__ = ("rollout_id", "index", "status", "reward", "error_kind", "counted", "replaced_by", "seed")
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    ERROR_KIND_FIELD_NUMBER: _ClassVar[int]
    COUNTED_FIELD_NUMBER: _ClassVar[int]
    REPLACED_BY_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    index: int
    status: RolloutStatus
    reward: float
    error_kind: ErrorKind
    counted: bool
    replaced_by: str
    seed: int
    def __init__(self, rollout_id: _Optional[str] = ..., index: _Optional[int] = ..., status: _Optional[_Union[RolloutStatus, str]] = ..., reward: _Optional[float] = ..., error_kind: _Optional[_Union[ErrorKind, str]] = ..., counted: _Optional[bool] = ..., replaced_by: _Optional[str] = ..., seed: _Optional[int] = ...) -> None: ...

class GroupStats(_message.Message):
    __slots__ = ("counted", "reward_mean", "reward_stddev", "statuses", "errors", "refills", "rewarded", "policy_version_min", "policy_version_max")
    COUNTED_FIELD_NUMBER: _ClassVar[int]
    REWARD_MEAN_FIELD_NUMBER: _ClassVar[int]
    REWARD_STDDEV_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    REFILLS_FIELD_NUMBER: _ClassVar[int]
    REWARDED_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_MIN_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_MAX_FIELD_NUMBER: _ClassVar[int]
    counted: int
    reward_mean: float
    reward_stddev: float
    statuses: _containers.RepeatedCompositeFieldContainer[GroupStatusCount]
    errors: _containers.RepeatedCompositeFieldContainer[GroupErrorCount]
    refills: int
    rewarded: int
    policy_version_min: int
    policy_version_max: int
    def __init__(self, counted: _Optional[int] = ..., reward_mean: _Optional[float] = ..., reward_stddev: _Optional[float] = ..., statuses: _Optional[_Iterable[_Union[GroupStatusCount, _Mapping]]] = ..., errors: _Optional[_Iterable[_Union[GroupErrorCount, _Mapping]]] = ..., refills: _Optional[int] = ..., rewarded: _Optional[int] = ..., policy_version_min: _Optional[int] = ..., policy_version_max: _Optional[int] = ...) -> None: ...

class GroupStatusCount(_message.Message):
    __slots__ = ("status", "count")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    status: RolloutStatus
    count: int
    def __init__(self, status: _Optional[_Union[RolloutStatus, str]] = ..., count: _Optional[int] = ...) -> None: ...

class GroupErrorCount(_message.Message):
    __slots__ = ("kind", "count")
    KIND_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    kind: ErrorKind
    count: int
    def __init__(self, kind: _Optional[_Union[ErrorKind, str]] = ..., count: _Optional[int] = ...) -> None: ...

class RunGroupRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: GroupSpec
    def __init__(self, spec: _Optional[_Union[GroupSpec, _Mapping]] = ...) -> None: ...

class RunGroupResponse(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: Group
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class StartGroupRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: GroupSpec
    def __init__(self, spec: _Optional[_Union[GroupSpec, _Mapping]] = ...) -> None: ...

class StartGroupResponse(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: Group
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class WatchGroupRequest(_message.Message):
    __slots__ = ("group_id",)
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    def __init__(self, group_id: _Optional[str] = ...) -> None: ...

class WatchGroupResponse(_message.Message):
    __slots__ = ("member", "group")
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    member: Rollout
    group: Group
    def __init__(self, member: _Optional[_Union[Rollout, _Mapping]] = ..., group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class GetGroupRequest(_message.Message):
    __slots__ = ("group_id",)
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    def __init__(self, group_id: _Optional[str] = ...) -> None: ...

class GetGroupResponse(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: Group
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ("labels", "statuses", "page_size", "page_token")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    statuses: _containers.RepeatedScalarFieldContainer[GroupStatus]
    page_size: int
    page_token: str
    def __init__(self, labels: _Optional[_Mapping[str, str]] = ..., statuses: _Optional[_Iterable[_Union[GroupStatus, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups", "next_page_token")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[Group]
    next_page_token: str
    def __init__(self, groups: _Optional[_Iterable[_Union[Group, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelGroupRequest(_message.Message):
    __slots__ = ("group_id", "reason")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    reason: str
    def __init__(self, group_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelGroupResponse(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: Group
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class OpenSessionRequest(_message.Message):
    __slots__ = ("spec", "copies", "idle_timeout", "max_lifetime")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    MAX_LIFETIME_FIELD_NUMBER: _ClassVar[int]
    spec: RolloutSpec
    copies: int
    idle_timeout: _duration_pb2.Duration
    max_lifetime: _duration_pb2.Duration
    def __init__(self, spec: _Optional[_Union[RolloutSpec, _Mapping]] = ..., copies: _Optional[int] = ..., idle_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_lifetime: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class OpenSessionResponse(_message.Message):
    __slots__ = ("sessions",)
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    def __init__(self, sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("id", "spec", "status", "create_time", "ready_time", "finish_time", "last_activity_time", "idle_timeout", "max_lifetime", "commands", "result", "tenant", "copy_index", "model_base_url")
    ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    READY_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_ACTIVITY_TIME_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    MAX_LIFETIME_FIELD_NUMBER: _ClassVar[int]
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    COPY_INDEX_FIELD_NUMBER: _ClassVar[int]
    MODEL_BASE_URL_FIELD_NUMBER: _ClassVar[int]
    id: str
    spec: RolloutSpec
    status: SessionStatus
    create_time: _timestamp_pb2.Timestamp
    ready_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    last_activity_time: _timestamp_pb2.Timestamp
    idle_timeout: _duration_pb2.Duration
    max_lifetime: _duration_pb2.Duration
    commands: int
    result: RolloutResult
    tenant: str
    copy_index: int
    model_base_url: str
    def __init__(self, id: _Optional[str] = ..., spec: _Optional[_Union[RolloutSpec, _Mapping]] = ..., status: _Optional[_Union[SessionStatus, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ready_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_activity_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., idle_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_lifetime: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., commands: _Optional[int] = ..., result: _Optional[_Union[RolloutResult, _Mapping]] = ..., tenant: _Optional[str] = ..., copy_index: _Optional[int] = ..., model_base_url: _Optional[str] = ...) -> None: ...

class ExecRequest(_message.Message):
    __slots__ = ("session_id", "command", "timeout", "cwd", "env", "max_output_bytes")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    command: str
    timeout: _duration_pb2.Duration
    cwd: str
    env: _containers.ScalarMap[str, str]
    max_output_bytes: int
    def __init__(self, session_id: _Optional[str] = ..., command: _Optional[str] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., cwd: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., max_output_bytes: _Optional[int] = ...) -> None: ...

class ExecOutput(_message.Message):
    __slots__ = ("stream", "data")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    stream: ExecStream
    data: bytes
    def __init__(self, stream: _Optional[_Union[ExecStream, str]] = ..., data: _Optional[bytes] = ...) -> None: ...

class ExecResult(_message.Message):
    __slots__ = ("exit_code", "timed_out", "duration", "stdout_bytes", "stderr_bytes", "output_bytes_dropped", "index")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    STDOUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDERR_BYTES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_BYTES_DROPPED_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    timed_out: bool
    duration: _duration_pb2.Duration
    stdout_bytes: int
    stderr_bytes: int
    output_bytes_dropped: int
    index: int
    def __init__(self, exit_code: _Optional[int] = ..., timed_out: _Optional[bool] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., stdout_bytes: _Optional[int] = ..., stderr_bytes: _Optional[int] = ..., output_bytes_dropped: _Optional[int] = ..., index: _Optional[int] = ...) -> None: ...

class ExecResponse(_message.Message):
    __slots__ = ("output", "result")
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    output: ExecOutput
    result: ExecResult
    def __init__(self, output: _Optional[_Union[ExecOutput, _Mapping]] = ..., result: _Optional[_Union[ExecResult, _Mapping]] = ...) -> None: ...

class ReadFileRequest(_message.Message):
    __slots__ = ("session_id", "path", "max_bytes")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    max_bytes: int
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class ReadFileResponse(_message.Message):
    __slots__ = ("found", "content", "truncated")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    found: bool
    content: bytes
    truncated: bool
    def __init__(self, found: _Optional[bool] = ..., content: _Optional[bytes] = ..., truncated: _Optional[bool] = ...) -> None: ...

class WriteFileRequest(_message.Message):
    __slots__ = ("session_id", "path", "content")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    content: bytes
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., content: _Optional[bytes] = ...) -> None: ...

class WriteFileResponse(_message.Message):
    __slots__ = ("size",)
    SIZE_FIELD_NUMBER: _ClassVar[int]
    size: int
    def __init__(self, size: _Optional[int] = ...) -> None: ...

class ListFilesRequest(_message.Message):
    __slots__ = ("session_id", "directory", "max_entries")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    directory: str
    max_entries: int
    def __init__(self, session_id: _Optional[str] = ..., directory: _Optional[str] = ..., max_entries: _Optional[int] = ...) -> None: ...

class SessionFile(_message.Message):
    __slots__ = ("path", "size")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    path: str
    size: int
    def __init__(self, path: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class ListFilesResponse(_message.Message):
    __slots__ = ("files", "truncated")
    FILES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[SessionFile]
    truncated: bool
    def __init__(self, files: _Optional[_Iterable[_Union[SessionFile, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class VerifySessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class VerifySessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("labels", "page_size", "page_token")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    page_size: int
    page_token: str
    def __init__(self, labels: _Optional[_Mapping[str, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    next_page_token: str
    def __init__(self, sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchSessionRequest(_message.Message):
    __slots__ = ("session_id", "after_seq")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    after_seq: int
    def __init__(self, session_id: _Optional[str] = ..., after_seq: _Optional[int] = ...) -> None: ...

class WatchSessionResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: RolloutEvent
    def __init__(self, event: _Optional[_Union[RolloutEvent, _Mapping]] = ...) -> None: ...
