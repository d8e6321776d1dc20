"""How the API is exposed: TLS credentials, and the refusal to serve other hosts unprotected.

    listen address                      without TLS and authentication
    127.0.0.0/8, ::1, localhost, unix:  allowed (the default: a trainer on the same machine)
    anything else (0.0.0.0, [::], ...)  refused at start, unless allow_insecure_listen
                                        (then a warning names what is missing)

Authentication is bearer tokens (`service.api.auth`) or client certificates (mTLS:
`tls_client_ca_file`). The check runs before the server opens anything, and its error names
the settings that would make the address safe.

The capture proxy's TCP listener (`proxy_listen`) follows the same rule. It speaks plain HTTP
(its routes are unguessable tokens, but a token, the model calls and their replies cross the
network in clear), so any address but loopback needs allow_insecure_listen; to serve remote
sandboxes safely, keep it on loopback behind a TLS front (`proxy_public_url`).

The web dashboard (`dashboard_listen`) serves the API's data, so it is held to the API's rule.

So does the Prometheus endpoint (`metrics_listen`, `api.metrics_port`), in plain HTTP: its
series name no tenant, rollout or label, but their counts show the server's workload. Other
hosts need allow_insecure_listen, or scrape tokens (`metrics_token_file`): those cross in
clear, but open this endpoint alone, whose answer a listener on the path reads anyway.
"""

from __future__ import annotations

import ipaddress
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

from service.config import Settings
from service.errors import ConfigError
from service.listen_address import host_and_port
from service.proxy import split_listen
from service.telemetry import metrics_address

__all__ = [
    "check_dashboard_exposure",
    "check_exposure",
    "check_metrics_exposure",
    "check_proxy_exposure",
    "is_loopback",
    "server_credentials",
]

log = logging.getLogger(__name__)


def is_loopback(listen: str) -> bool:
    """Whether a gRPC listen address is reachable only from this machine."""
    if listen.startswith(("unix:", "unix-abstract:")):
        return True
    parsed = host_and_port(listen)
    return parsed is not None and _is_loopback_host(parsed[0] or "")


def _is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost, or empty (every interface)


@dataclass(frozen=True)
class _TlsFiles:
    cert: Path
    key: Path
    client_ca: Path | None


def _tls_files(settings: Settings) -> _TlsFiles | None:
    """The API's TLS files, or None when TLS is off; ConfigError for a half-set pair."""
    cert, key, client_ca = (
        settings.tls_cert_file,
        settings.tls_key_file,
        settings.tls_client_ca_file,
    )
    if cert is None and key is None:
        if client_ca is not None:
            raise ConfigError("tls_client_ca_file needs tls_cert_file and tls_key_file")
        return None
    if cert is None or key is None:
        raise ConfigError("tls_cert_file and tls_key_file must be set together")
    return _TlsFiles(cert, key, client_ca)


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS credentials from the tls_* settings, or None when TLS is off."""
    files = _tls_files(settings)
    if files is None:
        return None
    client_ca = files.client_ca
    return grpc.ssl_server_credentials(
        [(_read("tls_key_file", files.key), _read("tls_cert_file", files.cert))],
        root_certificates=None if client_ca is None else _read("tls_client_ca_file", client_ca),
        require_client_auth=client_ca is not None,
    )


def server_ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The API's TLS for the server's HTTP listeners (the metrics endpoint), or None when TLS
    is off; client certificates required as the API requires them."""
    files = _tls_files(settings)
    if files is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(files.cert, files.key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"tls_cert_file and tls_key_file cannot be loaded: {exc}") from exc
    if files.client_ca is not None:
        ca = _read("tls_client_ca_file", files.client_ca)
        context.load_verify_locations(cadata=ca.decode())
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def peer_roots(settings: Settings) -> bytes | None:
    """The CA bundle replicas' certificates are checked against (None: the system's)."""
    peer_ca = settings.tls_peer_ca_file
    return None if peer_ca is None else _read("tls_peer_ca_file", peer_ca)


def _read(setting: str, path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{setting} {str(path)!r} cannot be read: {exc.strerror}") from exc
    if b"-----BEGIN " not in data:
        raise ConfigError(f"{setting} {str(path)!r} is not a PEM file")
    return data


def check_exposure(settings: Settings, *, encrypted: bool, authenticated: bool) -> None:
    """Refuse a non-loopback address without TLS or authentication, naming the settings."""
    if is_loopback(settings.listen) or (encrypted and authenticated):
        return
    _refuse_unless_allowed(settings, settings.listen, _missing(encrypted, authenticated))


def check_dashboard_exposure(settings: Settings, *, encrypted: bool, authenticated: bool) -> None:
    """Refuse a web dashboard address other than loopback on the API's terms."""
    listen = settings.dashboard_listen
    if not listen or is_loopback(listen) or (encrypted and authenticated):
        return
    address = f"{listen} (ROLLOUT_DASHBOARD_LISTEN, the web dashboard)"
    _refuse_unless_allowed(settings, address, _missing(encrypted, authenticated))


def _missing(encrypted: bool, authenticated: bool) -> str:
    missing = []
    if not encrypted:
        missing.append("TLS (ROLLOUT_TLS_CERT_FILE and ROLLOUT_TLS_KEY_FILE)")
    if not authenticated:
        missing.append(
            "authentication (ROLLOUT_AUTH_TOKENS, ROLLOUT_AUTH_TOKEN_FILE"
            " or ROLLOUT_TLS_CLIENT_CA_FILE)"
        )
    return " and ".join(missing)


def check_proxy_exposure(settings: Settings) -> None:
    """Refuse a capture-proxy listen address other than loopback: it is plain HTTP."""
    host, _ = split_listen(settings.proxy_listen)
    if not _is_loopback_host(host):
        _refuse_unless_allowed(
            settings,
            f"{settings.proxy_listen} (ROLLOUT_PROXY_LISTEN, the capture proxy)",
            "TLS (the proxy speaks plain HTTP: keep it on loopback behind a TLS front named "
            "by ROLLOUT_PROXY_PUBLIC_URL)",
        )


def check_metrics_exposure(settings: Settings) -> None:
    """Refuse a metrics endpoint other than loopback without scrape tokens."""
    if not settings.metrics_listen or settings.metrics_token_file is not None:
        return
    host, _ = metrics_address(settings.metrics_listen)
    if not _is_loopback_host(host):
        _refuse_unless_allowed(
            settings,
            f"{settings.metrics_listen} (ROLLOUT_METRICS_LISTEN, the Prometheus endpoint)",
            "authentication (anyone who reaches it reads the server's workload: give "
            "Prometheus a token of ROLLOUT_METRICS_TOKEN_FILE, or keep the endpoint on "
            "loopback or on a network only Prometheus reaches)",
        )


def _refuse_unless_allowed(settings: Settings, address: str, missing: str) -> None:
    if settings.allow_insecure_listen:
        log.warning("serving %s without %s", address, missing)
        return
    raise ConfigError(
        f"refusing to listen on {address}, which is not a loopback address, without "
        f"{missing}; set ROLLOUT_ALLOW_INSECURE_LISTEN=true to serve it anyway"
    )
