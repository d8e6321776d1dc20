"""Whether an HTTP request's Host names this listener: the guard against DNS rebinding.

A web page in the operator's browser may point a name it owns at 127.0.0.1 and then call a
listener on the operator's loopback as its own origin: the browser sends that name as the
Host. A listener that answers only the names it is known by refuses it:

    an IP address     the address the connection reached (the listener's own, or on a
                      wildcard listen address the interface's); an IPv4-mapped IPv6
                      address counts as its IPv4 address
    localhost         when the connection reached a loopback address (browsers never ask
                      DNS for it)
    a name            one of `names`: the listen address's own name and configured ones

The port is not compared: a rebinding page cannot choose the name the browser sends, and
the name is what it needs. A request without exactly one Host is refused.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

__all__ = ["host_allowed", "host_name"]

_LOCALHOST = "localhost"


def host_name(host: str) -> str:
    """A Host value (or a configured name) as compared: no port, no IPv6 brackets, lower
    case, no trailing dot."""
    host = host.strip()
    if host.startswith("["):
        name = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        name = host.partition(":")[0]
    else:
        name = host  # a bare IPv6 address, or a name without a port
    return name.lower().rstrip(".")


def host_allowed(hosts: Iterable[str], local_address: str | None, names: frozenset[str]) -> bool:
    """Whether the request whose Host headers are `hosts`, on a connection that reached
    `local_address`, names this listener (see the module's table). `names` are compared as
    `host_name` gives them."""
    given = list(hosts)
    if len(given) != 1:
        return False
    name = host_name(given[0])
    if name in names:
        return True
    local = _address(local_address or "")
    if local is None:
        return False
    if name == _LOCALHOST:
        return local.is_loopback
    return _address(name) == local


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.partition("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
