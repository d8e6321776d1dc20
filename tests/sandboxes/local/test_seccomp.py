"""The sandbox's seccomp filter refuses the kernel keyring and io_uring (issue 21), and
still lets every other syscall through."""

from __future__ import annotations

import json
import platform
import shlex

import pytest

from tests.sandboxes.conftest import MakeSandbox

_NUMBERS = {
    "x86_64": {"add_key": 248, "request_key": 249, "keyctl": 250, "getpid": 39},
    "aarch64": {"add_key": 217, "request_key": 218, "keyctl": 219, "getpid": 172},
}
_IO_URING = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427}
_EPERM, _ENOSYS = 1, 38

_CALL_EACH = (
    "import ctypes, json, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "answers = {}\n"
    "for name, number in json.loads(sys.argv[1]).items():\n"
    "    ctypes.set_errno(0)\n"
    "    answers[name] = [libc.syscall(number, 0, 0, 0, 0, 0), ctypes.get_errno()]\n"
    "print(json.dumps(answers))\n"
)


@pytest.mark.skipif(platform.machine() not in _NUMBERS, reason="syscall numbers of x86_64/arm64")
async def test_keyring_and_io_uring_are_refused(make_local_sandbox: MakeSandbox) -> None:
    """Unfiltered, these arguments answer EFAULT, EINVAL or EOPNOTSUPP: only the filter answers
    EPERM (keyring) and ENOSYS (io_uring, so its users fall back to epoll)."""
    sandbox = await make_local_sandbox()
    numbers = _NUMBERS[platform.machine()] | _IO_URING
    command = shlex.join(["python3", "-c", _CALL_EACH, json.dumps(numbers)])
    result = await sandbox.exec(command, timeout_s=30)
    answers = json.loads(result.stdout)
    assert answers.pop("getpid")[0] > 0, answers  # the filter still lets the rest through
    assert answers == {
        "keyctl": [-1, _EPERM],
        "add_key": [-1, _EPERM],
        "request_key": [-1, _EPERM],
        "io_uring_setup": [-1, _ENOSYS],
        "io_uring_enter": [-1, _ENOSYS],
        "io_uring_register": [-1, _ENOSYS],
    }, result.stderr
    await sandbox.kill()


async def test_a_root_server_guards_the_holder_by_uid_alone(
    make_local_sandbox: MakeSandbox,
) -> None:
    """Commands run as a uid of their own here: the kernel refuses their signals to the
    holder, and the filter leaves `kill -1` (all of the command's own) as it was; an
    unprivileged server's filter refuses it (tests/e2e/test_unprivileged.py)."""
    sandbox = await make_local_sandbox()
    result = await sandbox.exec("sleep 60 & kill -9 -1; wait $!; echo $?", timeout_s=30)
    assert result.stdout.strip() == "137", result.stderr  # the sleep: SIGKILL
    result = await sandbox.exec("kill -9 2", timeout_s=30)
    assert "Operation not permitted" in result.stderr
    assert (await sandbox.exec("true", timeout_s=30)).exit_code == 0  # the holder lives
    await sandbox.kill()
