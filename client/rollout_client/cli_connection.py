"""The command line's global connection options: bearer token and TLS.

They come before the command (`rollout --token-file ~/.rollout-token list`) or from the
environment. The app's callback keeps them for the invocation (a contextvar, so commands need
no extra parameter) and they are read only when a command connects: `rollout serve` ignores
them.
Prefer ROLLOUT_TOKEN or --token-file to --token: other users can read a process's arguments.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from rollout_client.client import RolloutClient
from rollout_client.connection import read_token_file, tls_credentials
from rollout_client.options import Version

__all__ = ["ConnectionOptions", "connect", "connection_options"]


@dataclass(frozen=True)
class ConnectionOptions:
    """The global options as given; turned into a client by `connect`."""

    token: str | None = None
    token_file: Path | None = None
    tls: bool = False
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None

    def client(self, target: str) -> RolloutClient:
        credentials = None
        if self.tls or self.tls_ca or self.tls_cert or self.tls_key:
            try:
                credentials = tls_credentials(
                    ca_file=self.tls_ca, cert_file=self.tls_cert, key_file=self.tls_key
                )
            except ValueError as exc:
                raise typer.BadParameter(
                    str(exc), param_hint="--tls-ca/--tls-cert/--tls-key"
                ) from exc
        try:
            return RolloutClient(target, token=self._token(), credentials=credentials)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--token/--token-file") from exc

    def _token(self) -> str:
        if self.token_file is not None:
            return read_token_file(self.token_file)
        return self.token or ""


_options: ContextVar[ConnectionOptions | None] = ContextVar("rollout_cli_connection", default=None)


def connection_options(
    token: Annotated[
        str | None,
        typer.Option(
            envvar="ROLLOUT_TOKEN",
            help="Bearer token for the server (visible in `ps`: prefer the env var).",
            show_default=False,
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(envvar="ROLLOUT_TOKEN_FILE", help="A file holding the bearer token."),
    ] = None,
    tls: Annotated[
        bool,
        typer.Option(
            "--tls",
            envvar="ROLLOUT_TLS",
            help="Speak TLS, trusting the system's roots (implied by the --tls-* files).",
        ),
    ] = False,
    tls_ca: Annotated[
        Path | None,
        typer.Option(envvar="ROLLOUT_TLS_CA", help="PEM CA that signed the server's certificate."),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option(envvar="ROLLOUT_TLS_CERT", help="PEM client certificate (for mTLS)."),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option(envvar="ROLLOUT_TLS_KEY", help="PEM key of --tls-cert."),
    ] = None,
    version: Version = False,
) -> None:
    """Run and inspect coding-agent rollouts on a rollout-service server."""
    if token and token_file:
        raise typer.BadParameter("give --token or --token-file, not both", param_hint="--token")
    _options.set(ConnectionOptions(token, token_file, tls, tls_ca, tls_cert, tls_key))


def connect(target: str) -> RolloutClient:
    """A client of `target` with the global connection options of the running command."""
    return (_options.get() or ConnectionOptions()).client(target)
