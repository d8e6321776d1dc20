"""The command line's connection options: --target, the bearer token and TLS.

Every command that talks to a server takes them, and so does `rollout` itself, before the
command: `rollout --token-file ~/.rollout-token list` and `rollout list --token-file ...` mean
the same; given in both places, the command's wins. Each comes from the command line, else the
environment (ROLLOUT_TOKEN, ROLLOUT_TOKEN_FILE, ROLLOUT_TLS, ROLLOUT_TLS_CA, ROLLOUT_TLS_CERT,
ROLLOUT_TLS_KEY), else its default; the target's default is the client's own
(`default_target`: $ROLLOUT_TARGET, else 127.0.0.1:50051). `rollout serve` ignores them.
Prefer ROLLOUT_TOKEN or --token-file to --token: other users can read a process's arguments.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated

import grpc
import typer

from rollout_client.aio import AsyncRolloutClient
from rollout_client.client import RolloutClient
from rollout_client.connection import default_target, read_token_file, tls_credentials
from rollout_client.exits import client_errors
from rollout_client.flag_groups import with_flags
from rollout_client.unreachable import Sent

__all__ = ["Connection", "connection_flags", "remember_global", "with_connection"]

_PANEL = "Connection (before or after the command)"
_TOKEN = frozenset({"token", "token_file"})


@dataclass(frozen=True)
class Connection:
    """Where the server is and how to reach it, as the flags and environment say."""

    target: str
    token: str | None = None
    token_file: Path | None = None
    tls: bool = False
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None

    @property
    def sent(self) -> Sent:
        """What this client offers in a handshake (how `client_errors` tells a closed one)."""
        if self.tls_cert is not None:
            return Sent.MTLS
        return Sent.TLS if self.tls or self.tls_ca or self.tls_key else Sent.PLAINTEXT

    def errors(self) -> AbstractContextManager[None]:
        """`client_errors` for this connection."""
        return client_errors(self.target, self.sent)

    def client(self) -> RolloutClient:
        credentials = self._credentials()
        try:
            return RolloutClient(self.target, token=self._token(), credentials=credentials)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--token/--token-file") from exc

    def async_client(self) -> AsyncRolloutClient:
        """The asyncio client (`rollout batch`); create it inside the loop that uses it."""
        credentials = self._credentials()
        try:
            return AsyncRolloutClient(self.target, token=self._token(), credentials=credentials)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--token/--token-file") from exc

    def _credentials(self) -> grpc.ChannelCredentials | None:
        if self.sent is Sent.PLAINTEXT:
            return None
        try:
            return tls_credentials(
                ca_file=self.tls_ca, cert_file=self.tls_cert, key_file=self.tls_key
            )
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--tls-ca/--tls-cert/--tls-key") from exc

    def _token(self) -> str:
        if self.token_file is not None:
            return read_token_file(self.token_file)
        return self.token or ""


# What `rollout` itself was given, before the command; set once per invocation.
_before_command: ContextVar[Connection | None] = ContextVar("rollout_connection", default=None)


def connection_flags(
    ctx: typer.Context,
    target: Annotated[
        str | None,
        typer.Option(
            help="The server's host:port (default: $ROLLOUT_TARGET, else 127.0.0.1:50051).",
            show_default=False,
            rich_help_panel=_PANEL,
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="ROLLOUT_TOKEN",
            help="Bearer token for the server (visible in `ps`: prefer the env var).",
            show_default=False,
            rich_help_panel=_PANEL,
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            envvar="ROLLOUT_TOKEN_FILE",
            help="A file holding the bearer token.",
            rich_help_panel=_PANEL,
        ),
    ] = None,
    tls: Annotated[
        bool,
        typer.Option(
            "--tls",
            envvar="ROLLOUT_TLS",
            help="Speak TLS, trusting the system's roots (implied by the --tls-* files).",
            rich_help_panel=_PANEL,
        ),
    ] = False,
    tls_ca: Annotated[
        Path | None,
        typer.Option(
            envvar="ROLLOUT_TLS_CA",
            help="PEM CA that signed the server's certificate.",
            rich_help_panel=_PANEL,
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option(
            envvar="ROLLOUT_TLS_CERT",
            help="PEM client certificate (for mTLS).",
            rich_help_panel=_PANEL,
        ),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option(
            envvar="ROLLOUT_TLS_KEY", help="PEM key of --tls-cert.", rich_help_panel=_PANEL
        ),
    ] = None,
) -> Connection:
    """The connection these flags describe; after the command, over those given before it."""
    here = Connection(target or default_target(), token, token_file, tls, tls_ca, tls_cert, tls_key)
    before = _before_command.get() if ctx.parent is not None else None
    if before is not None:
        here = _overlay(before, here, _on_command_line(ctx))
    if here.token and here.token_file:
        raise typer.BadParameter("give --token or --token-file, not both", param_hint="--token")
    return here


def _on_command_line(ctx: typer.Context) -> set[str]:
    """The connection flags typed after the command (not defaults or environment values,
    which the flags before the command already hold)."""
    names = (f.name for f in fields(Connection))
    sources = ((name, ctx.get_parameter_source(name)) for name in names)
    return {name for name, source in sources if source is not None and source.name == "COMMANDLINE"}


def _overlay(before: Connection, after: Connection, given: set[str]) -> Connection:
    values = {
        f.name: getattr(after if f.name in given else before, f.name) for f in fields(Connection)
    }
    if given & _TOKEN:  # a token given to the command replaces one given before, of either kind
        values.update({name: getattr(after, name) if name in given else None for name in _TOKEN})
    return Connection(**values)


def remember_global(connection: Connection) -> None:
    """Keep the connection flags given before the command, for the command to build on."""
    _before_command.set(connection)


with_connection = with_flags(connection_flags, into="connection")
"""Gives a command the connection flags, as a `connection: Connection` argument."""
