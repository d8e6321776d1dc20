"""Taking the sandbox back from the agent before verification, and what is reported of it.

Once the agent has finished, and before any verifier file exists in the sandbox
(`Sandbox.reclaim`, in this order; what the agent left is listed, for the notice, only
once its processes are dead, so none can disturb the listing):

1. every process the agent or the setup commands started is killed, daemons included,
   so nothing of the agent's runs while the verifier does;
2. VERIFIER_DIR is removed with whatever the agent left in it (never read) and made
   again, empty;
3. whatever the agent put at the path of a verifier file (a directory, a link, a
   read-only file, a file where a directory belongs) is removed, so staging cannot fail
   for a cause of the agent's: that loss is scored, never reported as infrastructure.

Each step that found something is reported as a `Notice`. Then, and only then, a
verifier under network FULL in a sandbox the agent had under NONE gets the sandbox's
network opened (`open_verifier_network`): nothing of the agent's is left to use it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from service.errors import SandboxError, first_of
from service.models import NetworkPolicy, Notice, SandboxSpec
from service.sandboxes import VERIFIER_DIR, InternetAccess, Sandbox

__all__ = ["open_verifier_network", "take_back", "verifier_network_notice"]

_NAMED_AT_MOST = 10
"""Paths named in a notice; the rest are counted."""


async def take_back(
    sandbox: Sandbox, verifier_files: Mapping[str, str], *, fresh_dirs: Sequence[str] = ()
) -> list[Notice]:
    """Reclaim the sandbox for verification; the notices say what was found.

    `verifier_files` maps each verifier file's sandbox path to the key that names it;
    `fresh_dirs` are made empty too (whatever the agent left there removed, unreported)."""
    files = sorted(verifier_files)
    killed = (await sandbox.reclaim()).processes  # first: nothing may disturb the listing
    left = await sandbox.list_files(VERIFIER_DIR, max_entries=_NAMED_AT_MOST)
    reclaimed = await sandbox.reclaim(remove=files, empty_dirs=[VERIFIER_DIR, *fresh_dirs])
    killed += reclaimed.processes
    notices = []
    if killed:
        notices.append(
            Notice(
                topic="verifier.processes_killed",
                message=f"killed {killed} processes still running after the agent, "
                "before verification",
            )
        )
    if VERIFIER_DIR in reclaimed.removed:
        held = first_of([entry.path for entry in left], _NAMED_AT_MOST)
        notices.append(
            Notice(
                topic="verifier.leftovers",
                message=f"removed {VERIFIER_DIR} as the agent left it, unread"
                + (f" (it held {held})" if held else ""),
            )
        )
    if in_the_way := [verifier_files[path] for path in reclaimed.removed if path in verifier_files]:
        notices.append(
            Notice(
                topic="verifier.files_replaced",
                message=f"removed what was at verifier file paths before staging them: "
                f"{first_of(in_the_way, _NAMED_AT_MOST)}",
            )
        )
    return notices


async def open_verifier_network(sandbox: Sandbox, spec: SandboxSpec) -> Notice | None:
    """Give a sandbox taken back (`take_back`) network FULL when its verifier has it
    and its agent had not; the notice says so."""
    notice = verifier_network_notice(spec)
    if notice is None:
        return None
    if not isinstance(sandbox, InternetAccess):
        raise SandboxError(
            f"spec.sandbox.verifier_network FULL: sandbox {sandbox.id} cannot open its "
            "network after creation; ask for network FULL or a backend that can"
        )
    await sandbox.open_internet()
    return notice


def verifier_network_notice(spec: SandboxSpec) -> Notice | None:
    """Said when the verifier's network is FULL and the agent's was not."""
    if spec.verifier_policy is not NetworkPolicy.FULL or spec.network is NetworkPolicy.FULL:
        return None
    return Notice(
        topic="verifier.network",
        message="the verifier runs with network FULL (the agent ran with NONE)",
    )
