"""What a caller asks for: the rollout spec and its parts.

Validation of values that need server settings (known agents, backends, size
bounds) lives in `service.engine.validation`; these models only hold data.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from service.models.dialect import DialectMode


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NetworkPolicy(StrEnum):
    """What the sandbox may reach."""

    NONE = "none"
    FULL = "full"


class CaptureMode(StrEnum):
    """Whether model calls go through the capture proxy."""

    TRANSPARENT_PROXY = "transparent_proxy"
    BLACK_BOX = "black_box"


class RewardSource(StrEnum):
    """Where a task's reward comes from (`service.verifier.reward`)."""

    AUTO = "auto"
    """A reward file if the verifier wrote one, else passed/total of the verify commands."""
    FILE = "file"
    """A reward file, which the verifier must write (Harbor tasks)."""
    COMMANDS = "commands"
    """Passed/total of the verify commands; reward files are not read."""


class VerifyMode(StrEnum):
    AUTO = "auto"
    """FRESH where the backend can make such a sandbox, else IN_PLACE."""
    FRESH = "fresh"
    """A new sandbox from setup's state, with only the agent's workdir carried in."""
    IN_PLACE = "in_place"
    """The agent's own sandbox, its processes dead, behind the integrity check (the local
    backend's: E2B has none)."""


class TaskSpec(_Model):
    """The task: prompt, commands around the agent, and files."""

    instruction: str
    """Prompt given to the agent."""
    setup: tuple[str, ...] = ()
    """Shell commands run before the agent; the first failure stops the rollout."""
    verify: tuple[str, ...] = ()
    """Shell commands run after the agent; each exit 0 counts as passed."""
    verify_display: tuple[str, ...] = ()
    """How each verify command is shown (its result's `display_command`) when it is a wrapper
    around what the task wrote (a Harbor task's `bash /tests/test.sh`); () shows them as run."""
    files: dict[str, bytes] = Field(default_factory=dict)
    """Workdir-relative files staged before setup."""
    verifier_files: dict[str, bytes] = Field(default_factory=dict)
    """Workdir-relative files staged only after the agent has finished."""
    reward_source: RewardSource = RewardSource.AUTO
    """Where the reward comes from."""
    reward_key: str = ""
    """The key of reward.json that is the reward when it has no "reward" key."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment of every setup command, the agent, the solution and the verifier."""
    file_modes: dict[str, str] = Field(default_factory=dict)
    """Octal mode ("755") of a file of `files`, `verifier_files` or `solution_files`."""
    solution_files: dict[str, bytes] = Field(default_factory=dict)
    """Files staged under SOLUTION_DIR for the oracle agent only."""
    verifier_env: dict[str, str] = Field(default_factory=dict)
    """Extra environment of the verify commands, over `env`."""
    solution_env: dict[str, str] = Field(default_factory=dict)
    """Extra environment of the oracle's solution, over `env`."""
    workdir: str = ""
    """Absolute working directory; empty means the sandbox's WORKDIR."""
    verify_mode: VerifyMode = VerifyMode.AUTO
    """In which sandbox the verifier runs (`service.engine.verification`)."""
    carried_paths: tuple[str, ...] = ()
    """Absolute paths carried with the workdir into a FRESH verifier's sandbox."""


class HarborTaskSpec(_Model):
    """A Harbor task directory named instead of inline task fields (`service.harbor`)."""

    path: str = ""
    """Relative to a server task root ("<root>/<path>", or "<path>" with one root)."""
    archive: bytes = Field(default=b"", repr=False)
    """The directory as a .tar.gz; cleared once resolved."""
    digest: str = ""
    """SHA-256 of the directory's content, set when it is resolved."""


class AgentSpec(_Model):
    """Which harness runs and how."""

    name: str = "command"
    """Harness name: "command", "opencode", "claude-code", "codex" or "mini-swe-agent"."""
    command: str = ""
    """Shell command for the "command" harness."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Harness-specific options."""


class EndpointSpec(_Model):
    """The caller's OpenAI-compatible endpoint (possibly a shorthand to resolve)."""

    kind: str = ""
    """Shorthand: "", "vllm", "openai" or "hf_router"."""
    base_url: str = ""
    """Base URL of the OpenAI-compatible API."""
    api_key: str = Field(default="", repr=False)
    """Secret: reaches the proxy's upstream requests and nothing else."""
    model: str = ""
    """Model name sent upstream."""
    dialect_mode: DialectMode = DialectMode.TRANSLATED
    """How Responses and Messages calls reach the upstream: translated to chat completions
    (token ids and logprobs) or native."""


class Resources(_Model):
    """Sandbox limits; 0 means the server default."""

    memory_mb: int = 0
    """Memory limit in MiB."""
    cpu_seconds: int = 0
    """CPU time per process in seconds."""
    max_processes: int = 0
    """Maximum number of processes."""
    max_file_size_mb: int = 0
    """Largest file a process may write, in MiB."""
    cpu_count: int = 0
    """CPUs (E2B)."""
    disk_mb: int = 0
    """Disk quota in MiB for everything the sandbox can write (local sandbox)."""


class SandboxSpec(_Model):
    """Where the rollout runs."""

    backend: str = ""
    """Backend name ("local" or "e2b"); empty means the server default."""
    template: str = ""
    """Backend template (E2B); empty means the backend default."""
    network: NetworkPolicy = NetworkPolicy.NONE
    """Network policy."""
    resources: Resources = Field(default_factory=Resources)
    """Resource limits."""
    image: str = ""
    """Image of a local sandbox (`service.sandboxes.local.image`): a store name, "host", or
    empty for the server's default."""
    verifier_network: NetworkPolicy | None = None
    """Network of the verify commands, which run once every process of the agent is dead
    (`service.sandboxes.internet`); None follows `network` (a Harbor task's is set by its
    allow_internet). FULL under `network` NONE opens the sandbox's network then."""

    @property
    def verifier_policy(self) -> NetworkPolicy:
        """The verifier's network, `verifier_network` or else `network`."""
        return self.verifier_network or self.network


class Sampling(_Model):
    """Sampling parameters the capture proxy sets on every model call (None: not sent, so
    the upstream's default applies; the agent's own are stripped either way:
    `service.proxy.capture.sampling`).

    On the wire this is `RolloutSpec.sampling`; it lives with the capture settings here
    because the proxy, which applies it, is handed those alone.
    """

    seed: int | None = None
    """Sent upstream as `seed`; in a group spec, the group's seed, from which each member's
    is derived (`service.engine.groups.members`)."""
    temperature: float | None = None
    """Sent upstream as `temperature`."""
    top_p: float | None = None
    """Sent upstream as `top_p`."""
    top_k: int | None = None
    """Sent upstream as `top_k` (-1 or 0: no limit); vLLM and SGLang only."""
    min_p: float | None = None
    """Sent upstream as `min_p`; vLLM and SGLang only."""
    presence_penalty: float | None = None
    """Sent upstream as `presence_penalty`."""
    frequency_penalty: float | None = None
    """Sent upstream as `frequency_penalty`."""
    repetition_penalty: float | None = None
    """Sent upstream as `repetition_penalty` (1: none); vLLM and SGLang only."""


class CaptureSpec(_Model):
    """How the capture proxy treats model calls."""

    mode: CaptureMode = CaptureMode.TRANSPARENT_PROXY
    """Proxy (record turns) or black box (direct, nothing recorded)."""
    max_tokens_cap: int = 0
    """Cap on max_tokens / max_completion_tokens; 0 means no cap."""
    top_logprobs: int = 1
    """Top-k logprobs asked per token (at least 1 so llama.cpp-style servers return logprobs)."""
    disable_thinking: bool = False
    """Set chat_template_kwargs.enable_thinking=false."""
    sampling: Sampling = Field(default_factory=Sampling)
    """Sampling overrides applied to every call (`RolloutSpec.sampling` on the wire)."""


class RolloutSpec(_Model):
    """Everything needed to run one rollout."""

    task_id: str = ""
    """Caller's name for the task."""
    task: TaskSpec
    """The task."""
    agent: AgentSpec = Field(default_factory=AgentSpec)
    """The agent."""
    endpoint: EndpointSpec = Field(default_factory=EndpointSpec)
    """The LLM endpoint."""
    sandbox: SandboxSpec = Field(default_factory=SandboxSpec)
    """The sandbox."""
    capture: CaptureSpec = Field(default_factory=CaptureSpec)
    """Capture settings."""
    agent_timeout_s: float | None = None
    """Agent budget in seconds; None means the server default."""
    command_timeout_s: float | None = None
    """Budget of each setup/verify command in seconds; None means the server default."""
    verify_timeout_s: float | None = None
    """Budget of each verify command in seconds; None means `command_timeout_s`."""
    harbor_task: HarborTaskSpec | None = None
    """A Harbor task directory, resolved into `task` and the rest at admission."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Free-form labels for List and Watch filters."""
    request_id: str = ""
    """Idempotency key."""
    max_policy_lag: int | None = None
    """How many policy versions a model call may start behind the rollout's oldest; beyond
    it the rollout ends POLICY_STALE (`proxy.capture.gate`). None: no bound."""

    def redacted(self) -> RolloutSpec:
        """This spec with every secret cleared: the only form that is stored or returned."""
        return self.model_copy(
            update={"endpoint": self.endpoint.model_copy(update={"api_key": ""})}
        )
