"""Listen addresses: HOST:PORT read (`host_and_port`) and written (`host_port`) here only;
whether a TCP listen address is free, and which process holds it when it is not.

A second server on a port in use must not start: gRPC binds with SO_REUSEPORT by default, so
the kernel would split clients between two servers with two databases, and rollouts would
"vanish" between calls. The server checks its addresses before anything opens (no store, no
recovery of another server's rollouts) and names the holder when this user can see it:

    /proc/net/tcp, tcp6   the listening socket's inode, by port
    /proc/<pid>/fd/*      the process with a descriptor on that inode (every process as
                          root; one's own otherwise)

Only the process name (`comm`) is shown: a command line may carry secrets.

And whether an HTTP request's Host header names a listener (`names_listener`), the one rule
of the HTTP listeners (the dashboard, the Prometheus endpoint): a web page whose site name
its owner made resolve to this host (DNS rebinding) reaches a listener from the browser of
anyone on this host or network, and the Host header is what still names that site. A request
must carry exactly one Host, HOST or HOST:PORT ([IPV6]:PORT), compared without its port, in
lower case, without a trailing dot; accepted:

    the listen host itself          127.0.0.1 for 127.0.0.1:9464, a name for NAME:9464
    localhost                       beside a loopback address (browsers resolve it
                                    themselves, never through DNS)
    any IP address                  beside a wildcard address (0.0.0.0, ::): an address
                                    cannot be rebound, only a name can
    a name of `names`               the listener's own setting (ROLLOUT_METRICS_HOSTS,
                                    ROLLOUT_DASHBOARD_HOSTS): e.g. a DNS name it is reached by
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import socket
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

from service.errors import ConfigError

__all__ = [
    "advertised",
    "bind",
    "bind_refusal",
    "ensure_free",
    "host_and_port",
    "host_port",
    "names_listener",
]

_PROC = Path("/proc")
_TCP_LISTEN = "0A"
"""The LISTEN state in /proc/net/tcp."""


def host_and_port(listen: str) -> tuple[str | None, int] | None:
    """HOST:PORT (an IPv6 host in brackets; no host: every interface) as host and port;
    None for an address that is not TCP (unix:...) or has no numeric port."""
    if listen.startswith(("unix:", "unix-abstract:", "vsock:")):
        return None
    host, colon, port = listen.rpartition(":")
    if not colon or not port.isdigit():
        return None
    return host.removeprefix("[").removesuffix("]") or None, int(port)


def host_port(host: str | None, port: int) -> str:
    """HOST:PORT written back (an IPv6 host in brackets; no host: `:PORT`)."""
    host = host or ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def advertised(listen: str, port: int) -> str:
    """Where other servers reach a listener on `listen` bound to `port`: HOST:PORT, or ''
    when its host names no one address (every interface, or not TCP)."""
    parsed = host_and_port(listen)
    if parsed is None or parsed[0] is None:
        return ""
    host = parsed[0]
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_unspecified:
            return ""
    return host_port(host, port)


def names_listener(hosts: Sequence[str], listen_host: str, names: Collection[str]) -> bool:
    """Whether a request whose Host header values are `hosts` (exactly one: HOST, HOST:PORT,
    [IPV6]:PORT) names the listener on `listen_host` or one of `names` (see the module's
    docstring)."""
    host = _host_of(hosts[0]) if len(hosts) == 1 else ""
    if not host:
        return False
    listen = _normal(listen_host)
    address, listening = _address(host), _address(listen)
    if host in {_normal(name) for name in names} or host == listen:
        return True
    if listening is None:  # a listener on a name: that name alone
        return False
    if host == "localhost":
        return listening.is_loopback
    return address is not None and (address == listening or listening.is_unspecified)


def _host_of(header: str) -> str:
    """The host of a Host header, normalised; "" when it is not HOST[:PORT]."""
    if header.startswith("["):
        host, bracket, rest = header[1:].partition("]")
        port = rest.removeprefix(":")
        valid = bool(bracket) and (not rest or (rest.startswith(":") and port.isdigit()))
        return _normal(host) if valid and _address(host) is not None else ""
    host, colon, port = header.partition(":")
    if colon and not port.isdigit():
        return ""
    return _normal(host)


def _normal(host: str) -> str:
    return host.strip().lower().removesuffix(".")


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def ensure_free(listen: str, setting: str, hint: str) -> None:
    """Refuse an address another socket listens on (or that cannot be bound at all): a
    ConfigError naming it, `setting`, the holder when known, and `hint` (what to do)."""
    parsed = host_and_port(listen)
    if parsed is None or parsed[1] == 0:
        return  # port 0 is always free; gRPC names any other failure when it binds
    host, port = parsed
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"{setting} is {listen!r}: {exc.strerror}") from None
    for family, kind, protocol, _, address in addresses:
        with socket.socket(family, kind, protocol) as probe:
            # As a server binds: a port whose last connections are in TIME_WAIT is free.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                raise bind_refusal(listen, port, setting, exc, hint) from None


def bind(host: str, port: int, setting: str) -> socket.socket:
    """A TCP socket bound to `host` (its first address) and `port`, not yet listening; a
    ConfigError naming `setting` when it cannot be."""
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        listener = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:  # socket.gaierror too
        raise ConfigError(f"{setting} is {listen!r}: {exc.strerror}") from exc
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        raise ConfigError(f"cannot listen on {listen} ({setting}): {exc.strerror}") from exc
    return listener


def bind_refusal(listen: str, port: int, setting: str, error: OSError, hint: str) -> ConfigError:
    """The ConfigError of a failed bind: who holds the port, or the system's reason."""
    if error.errno != errno.EADDRINUSE:
        return ConfigError(f"cannot listen on {listen} ({setting}): {error.strerror}")
    holders = sorted(set(_holders(port)))
    by = f" by {', '.join(holders)}" if holders else ""
    return ConfigError(f"{listen} ({setting}) is already in use{by}; {hint}")


def _holders(port: int) -> Iterator[str]:
    """'pid N (name)' of each process with a socket listening on `port`, as far as /proc shows."""
    inodes = set(_listening_inodes(port))
    if not inodes:
        return
    targets = {f"socket:[{inode}]" for inode in inodes}
    for process in _PROC.iterdir():
        if not process.name.isdigit():
            continue
        try:
            if any(str(fd.readlink()) in targets for fd in (process / "fd").iterdir()):
                name = (process / "comm").read_text().strip()
                yield f"pid {process.name} ({name})"
        except OSError:
            continue  # gone, or another user's process


def _listening_inodes(port: int) -> Iterator[str]:
    for table in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == _TCP_LISTEN and int(local.rsplit(":", 1)[1], 16) == port and inode != "0":
                yield inode
