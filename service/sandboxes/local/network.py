"""Network FULL for a local sandbox: the internet, never the host.

Under NONE bwrap gives the sandbox a network namespace holding only its loopback (the
capture proxy arrives as a Unix socket). Under FULL the sandbox gets such a namespace
too, plus one way out: `pasta` (Debian package passt), a user-mode network stack on the
host that turns the sandbox's packets into ordinary host sockets. What the sandbox can
reach, decided by pasta's options and the routes of its namespace (set by the spawner
before any command runs; no sandboxed process may change them: it has no capability
and cannot make a user namespace, `seccomp`):

    sandbox's 127.0.0.1, ::1   its own loopback (the proxy forwarder listens there)
    host loopback, any port    unreachable: pasta forwards no port either way
                               (-t/-u/-T/-U none) and maps no address to the host's
                               loopback (--no-map-gw); 127/8 in the namespace is its own
    host's own addresses       unreachable: a `prohibit` route for each (read from
                               /proc/net/fib_trie at create), so a service bound to
                               0.0.0.0 is not reached through pasta either
    private and special IPv4   unreachable (`prohibit`, EACCES): 0/8, 10/8, 100.64/10,
                               169.254/16, 172.16/12, 192.0.0/24, 192.168/16, 198.18/15,
                               224/4, 240/4; the gateway 169.254.2.1 is inside them
    DNS                        169.254.2.1 port 53 only (policy rules by protocol and
                               port), which pasta forwards to the host's first resolver;
                               the sandbox's /etc/resolv.conf names it
    IPv6                       none: pasta runs IPv4-only, so no IPv6 address, private
                               or not, is reachable
    every other IPv4 address   through pasta, as connections of the host

pasta runs as root (--runas 0, so it may enter the namespace; it keeps only
CAP_SYS_ADMIN and CAP_NET_BIND_SERVICE, under its own seccomp filter and no_new_privs, in
a mount namespace of its own), in the sandbox's memory cgroup, as a child of the
sandbox's spawner, and dies with it (parent-death signal).

A sandbox made under NONE gets the same network later when its verifier runs under FULL
(`attach_internet`, once every process of the agent is dead): pasta is then attached to
the namespace the sandbox already has, with the same options and routes, by the small
program `network_attach`, which holds it until the sandbox's init exits. Every sandbox
has its own /etc/resolv.conf naming the resolver above (under NONE it names nothing
reachable), so DNS works from the moment pasta is attached.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from pathlib import Path

from service.errors import SandboxError
from service.host_python import host_python
from service.sandboxes.local.bwrap import SandboxLayout
from service.sandboxes.local.network_attach import CONNECTED

__all__ = [
    "DNS_ADDRESS",
    "MISSING_TOOLS",
    "FullNetwork",
    "InternetLink",
    "attach_internet",
    "full_network",
    "has_network_tools",
    "host_addresses",
    "resolv_conf",
]

_INTERFACE = "eth0"
_ADDRESS = "169.254.2.2"
_GATEWAY = "169.254.2.1"
DNS_ADDRESS = _GATEWAY
_DNS_TABLE = 53
_PRIVATE = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
)
_FIB_TRIE = Path("/proc/net/fib_trie")
_ATTACH = ("-S", "-E", "-s", "-m", "service.sandboxes.local.network_attach")
"""`network_attach`, run like the fork server: the project root its working directory."""
_PROJECT_ROOT = Path(__file__).resolve().parents[3]
_ATTACH_WAIT_S = 30.0

FullNetwork = dict[str, list[str]]
"""What the spawner needs (`local_network_start.connect_network`): pasta's argv without
its target namespace, ip's argv, and the `ip -batch` lines to run in the namespace."""


def _pasta_argv(pasta: str, layout: SandboxLayout, privileged: bool) -> list[str]:
    return [
        pasta,
        *("--foreground", "--quiet", "--log-file", str(layout.network_log)),
        *(("--runas", "0:0") if privileged else ()),  # else it drops to nobody first
        "--ipv4-only",
        *("--ns-ifname", _INTERFACE, "--address", _ADDRESS, "--netmask", "32"),
        *("--gateway", _GATEWAY, "--no-map-gw", "--dns-forward", DNS_ADDRESS),
        *("--tcp-ports", "none", "--udp-ports", "none", "--tcp-ns", "none", "--udp-ns", "none"),
        *("--pid", str(layout.network_ready)),  # a FIFO: written once the interface exists
    ]


def host_addresses(fib_trie: str) -> list[str]:
    """The host's own (local and broadcast) IPv4 prefixes, from /proc/net/fib_trie."""
    found: list[str] = []
    address = ""
    for line in fib_trie.splitlines():
        text = line.strip()
        if text.startswith("|-- "):
            address = text[4:]
        elif text.startswith("/") and ("LOCAL" in text or "BROADCAST" in text):
            found.append(f"{address}/{text[1:].split()[0]}")
    return sorted(set(found))


def _routes() -> list[str]:
    """`ip -batch` lines: the interface up, a default route, the boundary, DNS."""
    lines = [
        f"link set {_INTERFACE} up",
        f"address add {_ADDRESS}/32 dev {_INTERFACE}",
        f"route add default via {_GATEWAY} dev {_INTERFACE} onlink",
    ]
    blocked = [*_PRIVATE, *host_addresses(_FIB_TRIE.read_text())]
    lines += [f"route add prohibit {prefix}" for prefix in dict.fromkeys(blocked)]
    lines.append(f"route add {DNS_ADDRESS}/32 dev {_INTERFACE} table {_DNS_TABLE}")
    for protocol in ("udp", "tcp"):
        lines.append(f"rule add to {DNS_ADDRESS}/32 ipproto {protocol} dport 53 table {_DNS_TABLE}")
    return lines


MISSING_TOOLS = (
    "network FULL needs pasta and ip on PATH (Debian/Ubuntu: apt-get install passt iproute2)"
)
"""Why FULL cannot be given here, when `pasta` or `ip` is missing."""


def has_network_tools() -> bool:
    """Whether FULL can be given here: pasta and ip on PATH."""
    return shutil.which("pasta") is not None and shutil.which("ip") is not None


def full_network(layout: SandboxLayout, privileged: bool) -> FullNetwork:
    """What the spawner of a FULL sandbox runs; raises naming the Debian packages when
    pasta or ip is missing."""
    pasta, ip = shutil.which("pasta"), shutil.which("ip")
    if pasta is None or ip is None:
        raise SandboxError(MISSING_TOOLS)
    return {
        "pasta": _pasta_argv(pasta, layout, privileged),
        "ip": [ip, "-batch", "-"],
        "routes": _routes(),
    }


def resolv_conf() -> str:
    """/etc/resolv.conf of every local sandbox: the one resolver a FULL one can reach
    (under NONE, until its verifier's network opens, nothing answers)."""
    return f"nameserver {DNS_ADDRESS}\n"


class InternetLink:
    """Network FULL opened on a live sandbox: the `network_attach` process holding its
    pasta. It ends by itself with the sandbox's init; `close` ends it at once."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process

    async def close(self) -> None:
        """Stop pasta (it dies with its parent). Idempotent."""
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
        await self._process.wait()


async def attach_internet(
    init_pidfd: int, layout: SandboxLayout, cgroup: str | None, privileged: bool
) -> InternetLink:
    """Give the live sandbox whose init `init_pidfd` names network FULL, as if it had
    been made under FULL (the module docstring); raises SandboxError saying why not."""
    setup = {
        "network": full_network(layout, privileged),
        "user_namespace": layout.uid is None,
        "cgroup": cgroup,
    }
    if not layout.network_ready.exists():
        os.mkfifo(layout.network_ready, 0o600)
    try:
        process = await asyncio.create_subprocess_exec(
            host_python().executable,
            *_ATTACH,
            str(init_pidfd),
            json.dumps(setup),
            stdin=asyncio.subprocess.PIPE,  # never written: its closing says the server is gone
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=(init_pidfd,),
            cwd=_PROJECT_ROOT,
            env={},
            start_new_session=True,
        )
    except OSError as exc:
        raise SandboxError(f"could not open the sandbox's network: {exc}") from exc
    link = InternetLink(process)
    assert process.stdout is not None
    assert process.stderr is not None
    try:
        said = await asyncio.wait_for(process.stdout.readline(), _ATTACH_WAIT_S)
    except TimeoutError:
        said = b""
    if said != CONNECTED:
        await link.close()
        why = (await process.stderr.read()).decode(errors="replace").strip()
        raise SandboxError(f"could not open the sandbox's network: {why or 'no reason given'}")
    return link
