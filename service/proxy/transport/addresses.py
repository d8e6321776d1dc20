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

An IPv4-mapped IPv6 address is judged as its IPv4 address; a host written in a legacy IPv4
form (`2852039166`, `0xa9fea9fe`, `169.254.43518`, which the resolver accepts) as the
address it denotes. A name is judged at admission only if it is a metadata name; what it
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


def address_problem(address: IPAddress, *, allow_private: bool) -> str:
    """Why an upstream may not be at `address`; "" when it may (see the module docstring)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
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
