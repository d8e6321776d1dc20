"""A sandboxed command cannot make a user namespace (and so no uid 0, no mounts of its own)."""

from __future__ import annotations

import platform

import pytest

from service.models import NetworkPolicy
from tests.sandboxes.conftest import MakeSandbox

_UNSHARE_IN_C_LIBRARY = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "print(libc.unshare(0x10000000), ctypes.get_errno())\n"  # CLONE_NEWUSER
)
_CLONE_IN_C_LIBRARY = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "pid = libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)\n"  # clone(CLONE_NEWUSER | SIGCHLD)
    "if pid == 0:\n"
    "    os._exit(0)\n"
    "print(pid, ctypes.get_errno())\n"
)


async def test_unshare_cannot_make_a_user_namespace(make_local_sandbox: MakeSandbox) -> None:
    for network in (NetworkPolicy.NONE, NetworkPolicy.FULL):
        sandbox = await make_local_sandbox(f"userns-{network.name.lower()}", network=network)
        nested = await sandbox.exec("unshare -Urm id -u", timeout_s=30)
        assert nested.exit_code != 0, nested.stdout
        assert "Operation not permitted" in nested.stderr
        raw = await sandbox.exec(f"python3 -c '{_UNSHARE_IN_C_LIBRARY}'", timeout_s=30)
        assert raw.stdout == "-1 1\n", raw.stderr  # EPERM
        await sandbox.kill()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="clone is syscall 56 on x86_64")
async def test_clone_with_a_new_user_namespace_is_refused(make_local_sandbox: MakeSandbox) -> None:
    sandbox = await make_local_sandbox()
    result = await sandbox.exec(f"python3 -c '{_CLONE_IN_C_LIBRARY}'", timeout_s=30)
    assert result.stdout == "-1 1\n", result.stderr  # EPERM
    await sandbox.kill()


async def test_threads_and_processes_still_start(make_local_sandbox: MakeSandbox) -> None:
    """clone3 answers ENOSYS; glibc falls back to clone for threads and forks."""
    sandbox = await make_local_sandbox()
    threads = "import threading; t = threading.Thread(target=print, args=('thread',)); t.start()"
    result = await sandbox.exec(f'python3 -c "{threads}" && (echo forked) | cat', timeout_s=30)
    assert result.stdout == "thread\nforked\n", result.stderr
    await sandbox.kill()
