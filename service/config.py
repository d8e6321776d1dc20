"""Server settings: one pydantic-settings model, read from `ROLLOUT_*` env vars and CLI flags."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings"]


def _default_state_dir() -> Path:
    return Path.home() / ".local" / "state" / "rollout-service"


def _default_cache_dir() -> Path:
    return Path.home() / ".cache" / "rollout-service"


class Settings(BaseSettings):
    """Every knob of the server. Units are in the field names."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLOUT_", extra="ignore", cli_kebab_case=True, cli_prog_name="rollout serve"
    )

    listen: str = "127.0.0.1:50051"
    """gRPC listen address (host:port; port 0 picks a free one)."""
    auth_tokens: list[SecretStr] = Field(default_factory=list)
    """Bearer tokens the API accepts, each "<token>" (admin) or "<token> <tenant>" (a JSON list)."""
    auth_token_file: Path | None = None
    """File of bearer tokens, one "<token> [<tenant>]" per line (# comments); read at start."""
    auth_health_open: bool = True
    """Health checks need no token (load balancers and probes)."""
    auth_reflection_open: bool = True
    """Server reflection needs no token (it shows only the public schema)."""
    tls_cert_file: Path | None = None
    """PEM certificate chain of the API; with tls_key_file, the API speaks only TLS."""
    tls_key_file: Path | None = None
    """PEM private key of tls_cert_file."""
    tls_client_ca_file: Path | None = None
    """PEM CA bundle: when set, every client must present a certificate it signed (mTLS)."""
    allow_insecure_listen: bool = False
    """Serve a non-loopback listen address without TLS or without authentication anyway."""
    state_dir: Path = Field(default_factory=_default_state_dir)
    """SQLite database, proxy socket and sandbox workdirs. Never visible inside a sandbox."""
    cache_dir: Path = Field(default_factory=_default_cache_dir)
    """Downloaded tools (the pinned opencode install). Visible read-only to sandboxes."""
    database: Path | None = None
    """SQLite file; default `<state_dir>/rollouts.db`."""

    max_running: int = 8
    """Rollouts running at once."""
    max_queued: int = 256
    """Rollouts waiting for a running slot; beyond this StartRollout is RESOURCE_EXHAUSTED."""
    default_backend: str = "local"
    """Sandbox backend when the spec names none."""

    agent_timeout_default_s: float = 600.0
    """Agent budget when the spec sets none."""
    agent_timeout_max_s: float = 6 * 3600.0
    """Largest agent budget a spec may ask for."""
    command_timeout_default_s: float = 120.0
    """Budget of each setup/verify command when the spec sets none."""
    command_timeout_max_s: float = 3600.0
    """Largest command budget a spec may ask for."""
    shutdown_grace_s: float = 10.0
    """On SIGTERM: how long in-flight rollouts may finish before they are cancelled."""

    output_head_bytes: int = 16 * 1024
    """Per command stream: bytes kept from the start of the output."""
    output_tail_bytes: int = 16 * 1024
    """Per command stream: bytes kept from the end of the output."""
    agent_output_event_bytes: int = 1024 * 1024
    """Raw agent output published as events per rollout; the rest is dropped."""
    agent_log_tail_bytes: int = 8 * 1024
    """Bytes of agent output kept as the result's agent_log_tail."""

    collect_max_files: int = 64
    """Workdir files collected into a result."""
    collect_max_file_bytes: int = 256 * 1024
    """Largest single file collected; larger ones are listed in files_omitted."""
    collect_max_total_bytes: int = 2 * 1024 * 1024
    """Total bytes of files collected into one result."""

    max_spec_bytes: int = 32 * 1024 * 1024
    """Largest accepted spec (task files included)."""
    max_message_bytes: int = 64 * 1024 * 1024
    """gRPC send/receive message limit (gRPC's default is 4 MiB)."""

    sandbox_memory_mb: int = 4096
    """Default memory limit of a local sandbox."""
    sandbox_cpu_seconds: int = 3600
    """Default CPU-seconds limit per process."""
    sandbox_max_processes: int = 512
    """Default process limit of a sandbox."""
    sandbox_max_file_size_mb: int = 1024
    """Default largest file a sandbox may write."""
    local_warm_sandboxes: int = 1
    """Local sandboxes made ahead, per network policy, so a rollout need not wait (0: off)."""

    proxy_listen: str = "127.0.0.1:0"
    """TCP address of the capture proxy (routes are per-rollout tokens)."""
    proxy_public_url: str = ""
    """If set, remote sandboxes reach the service's proxy here instead of running one inside."""
    upstream_timeout_s: float = 600.0
    """Budget of one upstream model call."""

    image_build_timeout_s: float = 3600.0
    """Budget of each tool run of an image build, import or unpack (mmdebstrap, buildah, skopeo)."""

    opencode_version: str = "1.18.33"
    """Pinned opencode-ai npm version."""

    e2b_template: str = "base"
    """E2B template when the spec names none."""
    e2b_max_sandboxes: int = 32
    """Hard cap on live E2B sandboxes (separate from max_running)."""
    e2b_creates_per_s: float = 5.0
    """E2B create-rate limit."""
    e2b_lifetime_margin_s: float = 300.0
    """Added to the agent budget to form the E2B sandbox timeout."""

    log_level: str = "INFO"
    """Python logging level of the server (DEBUG, INFO, WARNING, ERROR)."""

    instance_id: str = "default"
    """Names this service instance in remote sandbox metadata (orphan sweep)."""

    @property
    def database_path(self) -> Path:
        return self.database or self.state_dir / "rollouts.db"
