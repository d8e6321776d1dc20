"""Server settings: one pydantic-settings model, read from `ROLLOUT_*` env vars and CLI flags.

`load_settings` is how the server reads them: a bad value is one line naming the variable (or
flag), the value and what is expected, never pydantic's traceback.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from service.errors import ConfigError, excerpt
from service.listen_address import host_and_port

__all__ = ["Settings", "load_settings"]


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9.])?")
"""A DNS name (a trailing dot allowed) or an IPv4 address."""


def _is_host_name(name: str) -> bool:
    """A DNS name or an IP address (IPv6 without brackets): a name a Host header may give."""
    if _HOST_NAME.fullmatch(name):
        return True
    try:
        ipaddress.IPv6Address(name)
    except ValueError:
        return False
    return True


def _default_state_dir() -> Path:
    return Path.home() / ".local" / "state" / "rollout-service"


def _default_cache_dir() -> Path:
    return Path.home() / ".cache" / "rollout-service"


class Settings(BaseSettings):
    """Every knob of the server, a flag or a ROLLOUT_<NAME> environment variable (--state-dir
    or ROLLOUT_STATE_DIR). Units are in the field names."""

    # Each field's docstring is its description: `rollout serve --help` prints it.
    model_config = SettingsConfigDict(
        env_prefix="ROLLOUT_",
        extra="ignore",
        cli_kebab_case=True,
        cli_prog_name="rollout serve",
        use_attribute_docstrings=True,
    )

    _flags_given: frozenset[str] = PrivateAttr(default=frozenset())
    """The `--flag`s of the command line these settings were read from (`name_of`)."""

    listen: str = "127.0.0.1:50051"
    """gRPC listen address (host:port; port 0 picks a free one)."""
    advertise_address: str = ""
    """HOST:PORT the other servers sharing database_url reach this server's API at, to forward
    the calls of a session this server holds. Empty: the listen address with its bound port
    when its host is one other hosts can name (not 0.0.0.0 or [::]), else none (those calls
    are then FAILED_PRECONDITION naming this server)."""
    listen_reuse_port: bool = False
    """Share the listen port with other servers that set this too (SO_REUSEPORT: the kernel
    splits clients between them). Off: a port in use stops the server at start."""
    auth_tokens: list[SecretStr] = []  # pydantic copies it; a factory would print as one
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
    tls_peer_ca_file: Path | None = None
    """PEM CA bundle the other replicas' certificates are checked against when a session's
    call is forwarded to them (a private CA's). Unset: the system's roots."""
    allow_insecure_listen: bool = False
    """Serve a non-loopback listen address without TLS or without authentication, or the
    capture proxy (plain HTTP) on a non-loopback proxy_listen, anyway (with a warning)."""
    # Defaults made at import (not factories) so that --help shows the actual paths.
    state_dir: Path = _default_state_dir()
    """SQLite database and sandbox directories (with their proxy sockets); never in a sandbox."""
    cache_dir: Path = _default_cache_dir()
    """Downloaded tools (the pinned opencode install). Visible read-only to sandboxes."""
    database: Path | None = None
    """SQLite file; default `<state_dir>/rollouts.db`."""
    database_url: SecretStr | None = None
    """PostgreSQL database (postgresql://USER[:PASSWORD]@HOST[:PORT]/NAME) to keep rollouts
    in instead of the SQLite file, shared by every server given the same URL."""
    database_lease_s: float = Field(default=30.0, gt=0)
    """With database_url: a server that has not renewed its lease for this long is taken as
    dead, and another takes over its unfinished rollouts (ends them as interrupted)."""

    max_running: int = Field(default=8, ge=1)
    """Rollouts running at once (each local sandbox gets a share of per-user kernel counts
    sized by it, docs/sandboxes.md)."""
    max_queued: int = 256
    """Rollouts waiting for a running slot; beyond this StartRollout is RESOURCE_EXHAUSTED."""
    default_backend: str = "local"
    """Sandbox backend when the spec names none."""
    start_backends: list[str] = []
    """Backends built at start besides default_backend (a JSON list, e.g. ["e2b"]): a missing
    dependency then stops the server at start, and the sandboxes this instance left behind
    there are killed before it serves. Any other backend is built by its first rollout."""

    agent_timeout_default_s: float = 600.0
    """Agent budget when the spec sets none."""
    agent_timeout_max_s: float = 6 * 3600.0
    """Largest agent budget a spec may ask for."""
    command_timeout_default_s: float = 120.0
    """Budget of each setup/verify command when the spec sets none."""
    command_timeout_max_s: float = 3600.0
    """Largest command budget a spec may ask for."""
    session_idle_timeout_default_s: float = 600.0
    """A session's idle timeout when OpenSession sets none (docs/sessions.md)."""
    session_idle_timeout_max_s: float = 6 * 3600.0
    """Largest idle timeout a session may ask for."""
    session_lifetime_default_s: float = 3600.0
    """A session's total lifetime when OpenSession sets none."""
    session_lifetime_max_s: float = 6 * 3600.0
    """Largest lifetime a session may ask for (at most agent_timeout_max_s: its rollout's
    agent budget is its lifetime)."""
    session_probe_interval_s: float = Field(default=10.0, gt=0)
    """How often an idle session's sandbox is checked alive (a `true` run in it), so that a
    sandbox that died between commands fails its session then, not at the next call."""
    session_copies_max: int = Field(default=64, ge=1)
    """Most sessions one OpenSession may open from one setup."""
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
    watch_backlog_events: int = Field(default=10_000, ge=1)
    """Events a WatchRollout stream may fall behind its rollout (beyond what gRPC buffers, a few
    MiB per stream) before it ends RESOURCE_EXHAUSTED, saying which seq to resume after."""

    sandbox_memory_mb: int = 4096
    """Default memory limit of a local sandbox."""
    sandbox_cpu_seconds: int = 3600
    """Default CPU-seconds limit per process."""
    sandbox_max_processes: int = 512
    """Default process limit of a sandbox."""
    sandbox_max_file_size_mb: int = 1024
    """Default largest file a sandbox may write."""
    sandbox_memory_mb_max: int = 16 * 1024
    """Largest `resources.memory_mb` a spec may ask for."""
    sandbox_cpu_seconds_max: int = 6 * 3600
    """Largest `resources.cpu_seconds` a spec may ask for."""
    sandbox_max_processes_max: int = 4096
    """Largest `resources.max_processes` a spec may ask for (keep it under the host's limit)."""
    sandbox_max_file_size_mb_max: int = 16 * 1024
    """Largest `resources.max_file_size_mb` a spec may ask for."""
    sandbox_cpu_count_max: int = 8
    """Largest `resources.cpu_count` a spec may ask for (E2B)."""
    sandbox_disk_mb: int = Field(default=4096, ge=0)
    """Default disk quota of a local sandbox (home, workdir, /tmp), in MiB; 0: none unless
    the spec asks (plain directories: faster to make and remove)."""
    sandbox_disk_mb_max: int = Field(default=65536, ge=64)
    """Largest disk quota a spec may ask for, in MiB."""
    local_warm_sandboxes: int = 1
    """Local sandboxes made ahead, per network policy, so a rollout need not wait (0: off)."""
    local_warm_agents: bool = True
    """Start agents ahead in warm local sandboxes (opencode, mini-swe-agent): the last launch
    of each kind, used only if the next rollout would start exactly the same (off for a server
    not running as root, and with `local_warm_sandboxes` 0)."""
    local_warm_agents_max: int = Field(default=8, ge=0)
    """Most agents started ahead at once, over all kinds."""
    local_warm_agents_decay_s: float = Field(default=60.0, gt=0)
    """How long the demand for a kind's warm agents (the most of its rollouts alive at once)
    is held once fewer run, and then how fast it decays (times e^-t/this)."""
    local_warm_agents_min_available_mb: int = Field(default=2048, ge=0)
    """No agent is kept started ahead while the host's available memory is under this, in MiB."""
    local_disk_pool: int = Field(default=16, ge=0)
    """Local sandbox disks of the default size kept formatted and mounted, wiped after each
    sandbox, so a rollout need not wait for a mount (0: a new disk per sandbox)."""

    proxy_listen: str = "127.0.0.1:0"
    """TCP address of the capture proxy, for remote sandboxes (token routes)."""
    proxy_max_connections_per_sandbox: int = Field(default=64, ge=1)
    """Connections a sandbox may hold open on its own capture-proxy socket at once."""
    proxy_max_tcp_connections: int = Field(default=1024, ge=1)
    """Connections all clients together may hold open on the proxy's TCP listener."""
    proxy_idle_timeout_s: float = Field(default=60.0, gt=0)
    """A proxy connection must deliver a whole request within this of opening or of its
    previous response (ends idle and slow-header clients)."""
    proxy_turn_record_bytes: int = Field(default=2 * 1024 * 1024, ge=0)
    """Bytes of a model call's bodies (request messages, tools, completion) its turn records;
    the rest is cut, marked on the turn (body_cut). The call is relayed whole."""
    proxy_rollout_record_bytes: int = Field(default=16 * 1024 * 1024, ge=0)
    """Bytes of bodies one rollout's turns record together; later turns keep token ids,
    logprobs and metadata only. Keep it well under max_message_bytes."""
    proxy_public_url: str = ""
    """If set, remote sandboxes reach the service's proxy here instead of running one inside."""
    upstream_timeout_s: float = 600.0
    """Budget of one upstream model call."""
    upstream_weight_version_header: str = Field(
        default="x-weight-version", pattern=r"^[A-Za-z0-9-]*$", max_length=64
    )
    """A response header in which the upstream reports its weight version, recorded on each
    turn (`upstream_weight_version`); no common server sends one yet, so name what yours
    sends. Empty: none is read."""
    model_call_rules_per_tenant: int = Field(default=256, ge=1)
    """Standing policy versions and pauses each tenant (and the admin) keeps at most; past
    it, a version reaching no live rollout gives way, else RESOURCE_EXHAUSTED."""
    pause_max_s: float = Field(default=600.0, gt=0)
    """A PauseModelCalls lifts itself after this long if not resumed: its calls go on."""
    pause_credit_max_s: float = Field(default=1800.0, ge=0)
    """Time paused a rollout's agent is not charged for, at most; beyond it, paused time
    counts against the agent's timeout, so a pause cannot keep a rollout (its place, its
    sandbox) without bound. Its running slot it lends while its calls are all paused."""
    allow_private_endpoints: bool = False
    """Accept a caller's `endpoint.base_url` in a private range (10/8, 172.16/12, 192.168/16,
    100.64/10, fc00::/7). Loopback is always accepted; metadata and link-local never."""

    sandbox_image: str = "rollout/base"
    """Image of a local sandbox whose spec names none: a name of the image store, or "host"
    for the server's own root, read-only (an unprivileged server always uses "host")."""
    task_roots: list[Path] = []
    """Directories holding Harbor task directories a spec may name (`harbor_task.path`, as
    "<root's name>/<task>" or, with one root, "<task>"); nothing outside them (a JSON list, or
    paths separated by ":" as in PATH)."""
    harbor_archive_max_mb: int = 16
    """Largest uploaded Harbor task archive (`harbor_task.archive`), compressed, in MiB."""
    harbor_task_max_mb: int = 64
    """Largest Harbor task directory, uncompressed, in MiB (a path or an archive)."""
    harbor_upload_builds: bool = False
    """Build the Dockerfile of an uploaded Harbor task (`harbor_task.archive`). Off: only
    task roots' Dockerfiles are built, since a build's RUN steps run as root on the host."""
    harbor_context_ttl_s: float = Field(default=7 * 86400.0, gt=0)
    """Harbor build contexts unused for this long are removed (a task admitted again writes
    its context again)."""
    harbor_contexts_max_mb: int = Field(default=4096, ge=1)
    """Bytes on disk of the Harbor build contexts, in MiB; over it, the least recently used
    unused ones are removed (those of live rollouts and groups are kept, whatever it costs)."""
    image_build_timeout_s: float = 3600.0
    """Budget of each tool run of an image build, import or unpack (mmdebstrap, buildah, skopeo)."""
    image_aliases: dict[str, str] = {}
    """Image names that stand for local ones (JSON): {"ghcr.io/org/*": "mirror/*"}, `*` kept."""

    opencode_version: str = "1.18.33"
    """Pinned opencode-ai npm version."""
    opencode_empty_models_cache: bool = True
    """Give opencode an empty models.dev cache, so each start skips parsing the copy in its
    binary (~0.8 s of CPU; the rollout's model is in its config). Off: to measure the baseline."""

    e2b_template: str = "base"
    """E2B template when the spec names none."""
    e2b_max_sandboxes: int = 32
    """Hard cap on live E2B sandboxes (separate from max_running), FRESH verifiers' included;
    below 2, no room for one: E2B rollouts verify in place."""
    e2b_creates_per_s: float = 5.0
    """E2B create-rate limit."""
    e2b_lifetime_margin_s: float = 300.0
    """Added to the agent budget to form the E2B sandbox timeout."""

    log_level: str = "INFO"
    """Python logging level of the server (DEBUG, INFO, WARNING, ERROR)."""
    metrics_listen: str = ""
    """Prometheus scrape endpoint: PORT (on 127.0.0.1) or HOST:PORT; empty: off."""
    metrics_hosts: list[str] = []
    """Host header names the Prometheus endpoint answers besides its own address (a JSON
    list, e.g. ["rollout.example.internal"]); any other name is refused (DNS rebinding)."""
    metrics_token_file: Path | None = None
    """File of the bearer tokens a Prometheus scrape must send, one per line (# comments);
    tokens for scrapes alone, not the API's: they cross in plain HTTP. Unset: none needed."""
    dashboard_listen: str = ""
    """Web dashboard (HTTP, HTTPS with the API's tls_* files): HOST:PORT; empty: off."""
    dashboard_hosts: list[str] = []
    """Host header names the dashboard answers besides its own address (a JSON list: its DNS
    names, a reverse proxy's); any other name is refused (DNS rebinding)."""
    health_listen: str = ""
    """Plaintext HOST:PORT serving only grpc.health.v1, for probes without TLS; empty: off."""

    instance_id: str = "default"
    """Names this service instance in remote sandbox metadata (orphan sweep)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, _EnvSource(settings_cls), dotenv_settings, file_secret_settings

    @field_validator("task_roots", mode="before")
    @classmethod
    def _path_list(cls, value: object) -> object:
        if isinstance(value, str):  # not JSON (`_EnvSource`): a PATH-like list
            if value.lstrip().startswith("["):
                raise ValueError("not a valid JSON list")
            return [part for part in value.split(os.pathsep) if part]
        return value

    @field_validator("proxy_listen")
    @classmethod
    def _host_and_port(cls, value: str) -> str:
        parsed = host_and_port(value)
        if parsed is None or parsed[1] > 65535:
            raise ValueError("expected HOST:PORT, e.g. 127.0.0.1:0 (port 0 picks a free one)")
        return value

    @field_validator("metrics_hosts", "dashboard_hosts")
    @classmethod
    def _host_names(cls, value: list[str]) -> list[str]:
        for i, name in enumerate(value):
            if not _is_host_name(name):
                raise ValueError(
                    f"[{i}] is {excerpt(name)}: expected a host name or IP address, no port "
                    "or scheme (e.g. rollout.example.internal)"
                )
        return value

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith(_POSTGRES_SCHEMES):
            raise ValueError("expected postgresql://USER[:PASSWORD]@HOST[:PORT]/NAME")
        return value

    @field_validator("state_dir")
    @classmethod
    def _mountable(cls, value: Path) -> Path:
        """Local sandboxes mount overlays from below it, whose options cannot carry these."""
        if any(char in path for path in (str(value), os.path.realpath(value)) for char in ",:\\\n"):
            raise ValueError(
                "local sandboxes mount overlays from below it, and an overlay cannot name a "
                "path holding ',', ':', '\\' or a newline"
            )
        return value

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.upper() not in _LOG_LEVELS:
            raise ValueError(f"expected one of {', '.join(_LOG_LEVELS)}")
        return value

    def name_of(self, field: str) -> str:
        """How the operator set `field`: its flag if `rollout serve` was given it, else its
        variable (so a refusal names what to change)."""
        flag = _flag_of(field)
        return flag if flag in self._flags_given else "ROLLOUT_" + field.upper()

    @property
    def database_path(self) -> Path:
        return self.database or self.state_dir / "rollouts.db"

    @property
    def sandbox_resource_maxima(self) -> dict[str, int]:
        """The largest value a spec may ask for, by `Resources` field."""
        return {
            "memory_mb": self.sandbox_memory_mb_max,
            "cpu_seconds": self.sandbox_cpu_seconds_max,
            "max_processes": self.sandbox_max_processes_max,
            "max_file_size_mb": self.sandbox_max_file_size_mb_max,
            "cpu_count": self.sandbox_cpu_count_max,
            "disk_mb": self.sandbox_disk_mb_max,
        }

    @model_validator(mode="after")
    def _defaults_within_maxima(self) -> Settings:
        defaults = {
            "memory_mb": self.sandbox_memory_mb,
            "cpu_seconds": self.sandbox_cpu_seconds,
            "max_processes": self.sandbox_max_processes,
            "max_file_size_mb": self.sandbox_max_file_size_mb,
            "disk_mb": self.sandbox_disk_mb,
        }
        for name, default in defaults.items():
            maximum = self.sandbox_resource_maxima[name]
            if default > maximum:
                variable = f"ROLLOUT_SANDBOX_{name.upper()}"
                raise ValueError(
                    f"{variable} is {default}: expected at most {variable}_MAX ({maximum})"
                )
        return self


class _EnvSource(EnvSettingsSource):
    """The environment, where a list that is not JSON reaches the field's validation as the
    string it is (task_roots splits it like PATH; elsewhere the error names the variable)
    instead of failing in pydantic-settings' decoder with no name."""

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        try:
            return super().decode_complex_value(field_name, field, value)
        except ValueError:
            return value


def load_settings(argv: Sequence[str]) -> Settings:
    """The settings from ROLLOUT_* variables and `argv` (flags); a bad value is a ConfigError
    of one line per value: its variable or flag, the value (never a secret's) and what is
    expected."""
    try:
        settings = Settings(_cli_parse_args=list(argv))  # type: ignore[call-arg]
    except ValidationError as exc:
        problems = [_problem(error, argv) for error in exc.errors(include_url=False)]
        raise ConfigError("; ".join(problems)) from None
    except SettingsError as exc:
        raise ConfigError(str(exc)) from None
    settings._flags_given = frozenset(arg.split("=", 1)[0] for arg in argv if arg.startswith("--"))
    return settings


def _flag_of(field: str) -> str:
    return "--" + field.replace("_", "-")


def _problem(error: ErrorDetails, argv: Sequence[str]) -> str:
    expected = error["msg"].removeprefix("Value error, ")
    if expected.startswith("Input should be "):
        expected = "expected " + expected.removeprefix("Input should be ")
    if not error["loc"]:
        return expected  # a rule between settings, which names them itself
    field = str(error["loc"][0])
    flag = _flag_of(field)
    given_as_flag = any(arg == flag or arg.startswith(flag + "=") for arg in argv)
    name = flag if given_as_flag else "ROLLOUT_" + field.upper()
    info = Settings.model_fields[field]
    value = "(hidden)" if "SecretStr" in str(info.annotation) else excerpt(str(error["input"]))
    meaning = " ".join((info.description or "").split()).rstrip(".")
    return f"{name} is {value}: {expected} ({meaning})"
