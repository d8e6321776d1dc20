"""The program that gives a live local sandbox network FULL, and holds it for its life.

A sandbox made under network NONE has a network namespace with only its loopback
(`bwrap`). When its verifier runs under FULL (`SandboxSpec.verifier_network`; every
process of the agent is dead by then), the server starts this program
(`network.attach_internet`) with a pidfd of the sandbox's init. It joins the sandbox's
memory cgroup, starts pasta for the sandbox's existing namespace and routes it exactly
as a FULL sandbox's spawner does at creation (`network_start.attach_network`, the rules
in `network`), prints `connected`, then waits. It exits, and pasta with it (its
parent-death signal), when the sandbox's init is gone, when pasta is, or when its stdin
closes (the server died); the server kills it at the sandbox's teardown.

Run as `python -S -E -s -m service.sandboxes.local.network_attach PIDFD SETUP_JSON`
from the project root: standard library and its siblings `holder_start`,
`network_start` and `mounts` only, like `forkserver`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from service.sandboxes.local.descriptors import readable
from service.sandboxes.local.holder_start import SetupError, default_dispositions, join_cgroup
from service.sandboxes.local.network_start import attach_network

__all__: list[str] = []  # a program, run by `network.attach_internet`

CONNECTED = b"connected\n"
"""What it prints once the sandbox's network is up."""


def _main(init_pidfd: int, setup: dict[str, Any]) -> int:
    unjoined = join_cgroup(setup["cgroup"])
    if unjoined is not None:
        print(f"pasta runs outside the sandbox's memory cgroup: {unjoined}", file=sys.stderr)
    try:
        pasta, _ = attach_network(init_pidfd, setup["network"], setup["user_namespace"])
    except (OSError, SetupError, KeyError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 1
    os.write(1, CONNECTED)
    pasta_fd = os.pidfd_open(pasta)
    while True:
        ready = readable([init_pidfd, pasta_fd, 0], None)
        if init_pidfd in ready or pasta_fd in ready or (0 in ready and not os.read(0, 4096)):
            return 0


if __name__ == "__main__":
    default_dispositions()
    sys.exit(_main(int(sys.argv[1]), json.loads(sys.argv[2])))
