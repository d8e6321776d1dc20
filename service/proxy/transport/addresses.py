"""Where an upstream LLM endpoint may not be: the proxy must not become a tenant's way into
the server's own network.

The proxy POSTs to the caller's `base_url` and returns the answer in the turns, so an
endpoint on a cloud metadata service would hand the tenant the host's credentials. Refused:

| address                                         | refused                                 |
| ----------------------------------------------- | --------------------------------------- |
| 169.254.169.254, fd00:ec2::254 (AWS, GCP, Azure, | always: no LLM serves there             |
| Oracle), 100.100.100.200 (Alibaba); the names    |                                         |
| metadata.google.internal, metadata, ...          |                                         |
| link-local 169.254.0.0/16, fe80::/10             | always                                  |
| 10/8, 172.16/12, 192.168/16, 100.64/10 (CGNAT),  | unless the operator allows them         |
| fc00::/7                                         | (ROLLOUT_ALLOW_PRIVATE_ENDPOINTS)       |
| loopback 127/8, ::1, 0.0.0.0                     | never: trainers run vLLM on the host    |

An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is judged as its IPv4 address; a host written
in a legacy IPv4 form (`2852039166`, `0xa9fea9fe`, `169.254.43518`, which the resolver
accepts) as the address it denotes. An IPv6 address that carries an IPv4 address a
translator or tunnel delivers to is refused when any IPv4 address it may carry would be:

| IPv6 form                             | the IPv4 address it carries                          |
| ------------------------------------- | ---------------------------------------------------- |
| IPv4-compatible `::a.b.c.d` (::/96)   | the last 32 bits (`::` and `::1` are themselves)     |
| SIIT `::ffff:0:a.b.c.d`               | the last 32 bits                                     |
| NAT64 64:ff9b::/96 (RFC 6052)         | the last 32 bits                                     |
| NAT64 local use 64:ff9b:1::/48        | each place RFC 6052 puts it for a prefix of 48, 56,  |
| (RFC 8215)                            | 64 or 96 bits: the operator's prefix length is not   |
|                                       | known here, so every reading is judged               |
| 6to4 2002::/16                        | bits 16-48                                           |
| Teredo 2001::/32                      | the server (bits 32-64) and the client (the last 32  |
|                                       | bits, inverted)                                      |

A URL's bracketed host (`http://[::a9fe:a9fe%25eth0]/`) is judged as the address inside,
its zone dropped. A name is judged at admission only if it is a metadata name; what it
resolves to is judged when the proxy connects (`upstream`), on the address it connects to.
Standard library only: the proxy inside a remote sandbox imports it too.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

__all__ = ["address_problem", "host_problem", "url_problem"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address)
    for address in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
_METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
_LINK_LOCAL = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))
_PRIVATE = tuple(
    ipaddress.ip_network(network)
    for network in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
)
_LAST_32_BITS = tuple(
    ipaddress.ip_network(network) for network in ("::/96", "::ffff:0:0:0/96", "64:ff9b::/96")
)
"""IPv4-compatible, SIIT and NAT64 (well-known prefix) addresses: the IPv4 address is last."""
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")


def address_problem(address: IPAddress, *, allow_private: bool) -> str:
    """Why an upstream may not be at `address`; "" when it may (see the module docstring)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if problem := _own_problem(address, allow_private=allow_private):
        return problem
    if isinstance(address, ipaddress.IPv6Address):
        for carried in _carried_ipv4(address):
            if problem := _own_problem(carried, allow_private=allow_private):
                return f"{address} carries {carried}: {problem}"
    return ""


def _own_problem(address: IPAddress, *, allow_private: bool) -> str:
    """Why an upstream may not be at `address` itself, whatever it may carry."""
    if address in _METADATA_ADDRESSES:
        return f"{address} is a cloud metadata address"
    if any(address in network for network in _LINK_LOCAL):
        return f"{address} is a link-local address"
    if not allow_private and any(address in network for network in _PRIVATE):
        return (
            f"{address} is in a private range; the operator allows private endpoints with "
            "ROLLOUT_ALLOW_PRIVATE_ENDPOINTS=true"
        )
    return ""


def _carried_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """Every IPv4 address `address` may deliver to through a translator or tunnel (the
    module docstring's second table)."""
    bits = int(address)
    readings: tuple[int, ...]
    if address in _LOCAL_NAT64:
        readings = (
            _bits(bits, 48, 64) << 16 | _bits(bits, 72, 88),
            _bits(bits, 56, 64) << 24 | _bits(bits, 72, 96),
            _bits(bits, 72, 104),
            _bits(bits, 96, 128),
        )
    elif any(address in network for network in _LAST_32_BITS) and bits > 1:
        readings = (_bits(bits, 96, 128),)
    elif address.sixtofour is not None:
        return (address.sixtofour,)
    elif address.teredo is not None:
        return address.teredo
    else:
        return ()
    return tuple(ipaddress.IPv4Address(reading) for reading in readings)


def _bits(number: int, start: int, end: int) -> int:
    """Bits `start` to `end` (exclusive, counted from the left) of a 128-bit `number`."""
    return number >> (128 - end) & ((1 << (end - start)) - 1)


def host_problem(host: str, *, allow_private: bool) -> str:
    """Why an upstream may not be at `host` (a URL's host name), judged without resolving it."""
    name = host.lower().rstrip(".")
    if name in _METADATA_NAMES:
        return f"{name} is a cloud metadata host"
    address = _literal_address(name)
    return "" if address is None else address_problem(address, allow_private=allow_private)


def url_problem(url: str, *, allow_private: bool) -> str:
    """`host_problem` of `url`'s host; "" for a URL with no host to judge (refused elsewhere)."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return ""
    return host_problem(host, allow_private=allow_private) if host else ""


def _literal_address(host: str) -> IPAddress | None:
    """The address `host` denotes without a lookup, in any form the resolver accepts."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])  # an IPv6 zone is no other address
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None
