"""`--local`: a server of the command's own, for `rollout run` and `rollout batch`.

One command for one job, as `harbor run` is: the server runs in a child process
(`python -m service.server`, as `rollout serve` does) on the defaults, but for three things of
its own: a free loopback port (port 0, learnt from its "listening on" line), a state directory
under the temp dir (its database and sandboxes) and that directory's database, so it never
shares a port, a database or a sandbox with a server the user runs. The cache (the base image,
agent installs) is the user's, shared. The child has a session of its own, so a Ctrl-C at the
terminal reaches only the command, which cancels its rollouts first; then the server gets
SIGTERM and drains (killing every sandbox) before the state directory goes. The child also gets
SIGTERM if the command dies without its `finally`.
"""

from __future__ import annotations

import ctypes
import dataclasses
import re
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import IO, Annotated

import typer

from rollout_client.cli_connection import Connection
from rollout_client.exits import fail
from rollout_client.server_process import require_server, server_argv

__all__ = ["Local", "served"]

_LISTENING = re.compile(r"rollout-service listening on (\S+)")
_START_TIMEOUT_S = 120.0
_STOP_TIMEOUT_S = 120.0
_OUTPUT_SHOWN = 20
"""The server's last lines shown when it does not start."""
_PR_SET_PDEATHSIG = 1

Local = Annotated[
    bool,
    typer.Option(
        "--local",
        help="Start a server of its own for this command (loopback, a temporary state "
        "directory) and stop it at the end, instead of using --target.",
    ),
]


def served(connection: Connection, local: bool) -> AbstractContextManager[Connection]:
    """The connection to use: `connection`, or with `local` an embedded server's."""
    return _embedded_server() if local else nullcontext(connection)


@contextmanager
def _embedded_server() -> Iterator[Connection]:
    require_server("`--local`")
    with tempfile.TemporaryDirectory(
        prefix="rollout-local-", ignore_cleanup_errors=True
    ) as state_dir:
        server = _start(Path(state_dir))
        try:
            yield Connection(_wait_until_listening(server))
        finally:
            _stop(server.process)


@dataclasses.dataclass
class _Server:
    process: subprocess.Popen[str]
    output: list[str]
    listening: threading.Event
    target: str = ""


def _start(state_dir: Path) -> _Server:
    argv = server_argv("--listen", "127.0.0.1:0", "--state-dir", str(state_dir))
    argv += ["--database", str(state_dir / "rollouts.db")]
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the terminal's Ctrl-C is the command's to handle
        preexec_fn=_die_with_parent,
    )
    server = _Server(process, [], threading.Event())
    assert process.stdout is not None
    threading.Thread(target=_read, args=(server, process.stdout), daemon=True).start()
    return server


def _die_with_parent() -> None:
    """In the child: SIGTERM when the command's process dies, however it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _read(server: _Server, stream: IO[str]) -> None:
    """Keep the server's output (for a failed start) and learn its address."""
    for line in stream:
        server.output.append(line)
        match = _LISTENING.search(line)
        if match and not server.target:
            server.target = match.group(1)
            server.listening.set()
    server.listening.set()  # the server ended before listening


def _wait_until_listening(server: _Server) -> str:
    if not server.listening.wait(_START_TIMEOUT_S) or not server.target:
        _stop(server.process)
        shown = "".join(server.output[-_OUTPUT_SHOWN:]).rstrip() or "(no output)"
        fail(f"the local server did not start:\n{shown}")
    return server.target


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM: the server drains, killing its sandboxes; SIGKILL only if it hangs."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
