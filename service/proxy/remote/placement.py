"""Where the capture proxy's code lies in a remote sandbox, and what must be uploaded there.

One probe asks the sandbox's python3 for its version and ABI, whether the proxy's libraries
import, and the digest of a template's pre-installed copy (see `bundle` for the layout);
`choose_layout` then takes the cheapest way that runs this service's very proxy:
- the template's copy is this service's proxy: run it, nothing uploaded;
- the template has the libraries: upload the sources (~30 KB);
- the sandbox's python has this host's ABI: upload sources and libraries (~3 MB);
- else the rollout fails (kind SANDBOX), naming the fix.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from service.errors import SandboxError
from service.proxy.remote.bundle import IMPORTS, host_abi, source_digest
from service.sandboxes import Sandbox

__all__ = ["TEMPLATE_DIR", "UPLOAD_DIR", "Layout", "Probe", "choose_layout", "probe"]

TEMPLATE_DIR = "/opt/rollout-proxy"
"""Where a template built by scripts/build_e2b_template.py has the proxy."""
UPLOAD_DIR = "/tmp/rollout-proxy"
"""Where the proxy is uploaded when the template does not have it."""
PROBE_TIMEOUT_S = 60.0
_FIX = (
    "build the template with scripts/build_e2b_template.py, or set the server's "
    "proxy_public_url so that sandboxes use the service's own proxy"
)
_PROBE = """
import importlib.util, json, sys, sysconfig
sys.path[:0] = [sys.argv[1] + "/lib"]
try:
    with open(sys.argv[1] + "/DIGEST") as file:
        digest = file.read().strip()
except OSError:
    digest = ""
print(json.dumps({
    "version": list(sys.version_info[:2]),
    "abi": sys.implementation.cache_tag + "-" + sysconfig.get_platform(),
    "libraries": all(importlib.util.find_spec(name) for name in sys.argv[2:]),
    "digest": digest,
}))
"""


@dataclass(frozen=True)
class Probe:
    """What a sandbox's python3 has to offer."""

    version: tuple[int, int]
    abi: str
    libraries: bool
    """Whether the proxy's libraries import (from TEMPLATE_DIR/lib or site-packages)."""
    digest: str
    """`source_digest()` of the template's pre-installed proxy; empty when it has none."""


@dataclass(frozen=True)
class Layout:
    """Where the proxy's sources and libraries are in the sandbox, and what to upload."""

    sources: str
    libraries: str
    upload: tuple[str, ...] = ()
    """Tarball names to upload and unpack into UPLOAD_DIR: "sources", "libraries"."""


def choose_layout(probe: Probe) -> Layout:
    """The cheapest way to run this service's proxy in a sandbox like `probe`."""
    if probe.version < (3, 11):
        version = ".".join(map(str, probe.version))
        raise SandboxError(
            f"the capture proxy needs Python >= 3.11, the sandbox has {version}: {_FIX}"
        )
    if probe.libraries and probe.digest == source_digest():
        return Layout(f"{TEMPLATE_DIR}/src", f"{TEMPLATE_DIR}/lib")
    if probe.libraries:
        return Layout(f"{UPLOAD_DIR}/src", f"{TEMPLATE_DIR}/lib", ("sources",))
    if probe.abi == host_abi():
        return Layout(f"{UPLOAD_DIR}/src", f"{UPLOAD_DIR}/lib", ("sources", "libraries"))
    raise SandboxError(
        f"the sandbox's python3 lacks the capture proxy's libraries ({', '.join(IMPORTS)}) and is "
        f"{probe.abi}, where this service can ship only {host_abi()} builds: {_FIX}"
    )


async def probe(sandbox: Sandbox) -> Probe:
    """Ask the sandbox's python3 what it has (one command)."""
    command = f"python3 -I -c {shlex.quote(_PROBE)} {TEMPLATE_DIR} {' '.join(IMPORTS)}"
    result = await sandbox.exec(command, timeout_s=PROBE_TIMEOUT_S)
    try:
        found: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
        return Probe(
            version=(int(found["version"][0]), int(found["version"][1])),
            abi=str(found["abi"]),
            libraries=bool(found["libraries"]),
            digest=str(found["digest"]),
        )
    except (ValueError, LookupError, TypeError) as exc:
        detail = "timed out" if result.timed_out else f"exit {result.exit_code}"
        raise SandboxError(
            f"could not run python3 in the sandbox for the capture proxy ({detail}: "
            f"{result.stderr.strip()[-500:]}): {_FIX}"
        ) from exc
