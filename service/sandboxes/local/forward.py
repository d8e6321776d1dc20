"""A TCP -> Unix-socket forwarder, run inside a sandbox. Standard library only.

    python -I -S forward.py --listen 127.0.0.1:PORT --unix /run/rollout/proxy.sock

Agents such as opencode need an http:// URL, but a sandbox with a private network
namespace reaches the capture proxy only through its Unix socket. This script binds the
TCP port, checks that the socket answers, then daemonizes: the command prints the daemon's
pid and returns (exit 0) only once the port is listening, so the agent never races the
listener. On failure it prints why and exits 1. The daemon lives until the service stops it
as the agent's model access ends (`proxy.access.stop_forwarder`), or the sandbox's
processes are killed.

It lives with the local sandboxes, whose plumbing it is (the proxy's side is the socket),
so the sandbox that binds it into its host kit needs nothing from the proxy's layer above.
The service starts it before the agent (`proxy.access.start_forwarder`) on the server's own
interpreter: from the read-only host root, or on an image from the host kit, whose
standard library is the host's (`sandboxes.local.host_kit`). So it must import nothing
outside the standard library.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import sys

__all__ = ["main"]

_READ_BYTES = 256 * 1024


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF, then half-close the other side so it sees the end too."""
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(_READ_BYTES):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


async def _forward(
    unix_path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        upstream_reader, upstream_writer = await asyncio.open_unix_connection(unix_path)
    except OSError:
        writer.close()
        return
    try:
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
    finally:
        upstream_writer.close()
        writer.close()


async def _serve(listener: socket.socket, unix_path: str) -> None:
    server = await asyncio.start_server(
        lambda r, w: _forward(unix_path, r, w), sock=listener, limit=_READ_BYTES
    )
    async with server:
        await server.serve_forever()


def _check_socket(unix_path: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.connect(unix_path)


def _daemonize() -> None:
    """Return in a detached child; the parent prints its pid and exits 0 (the listener is
    already bound)."""
    child = os.fork()
    if child:
        print(child, flush=True)
        os._exit(0)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    # Holding the agent command's stdout/stderr open would keep its output pipes alive.
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="HOST:PORT to listen on")
    parser.add_argument("--unix", required=True, help="Unix socket to forward to")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    try:
        listener = socket.create_server((host, int(port)), backlog=256)
        _check_socket(args.unix)
    except (OSError, ValueError) as exc:
        print(f"forward: cannot forward {args.listen} -> {args.unix}: {exc}", file=sys.stderr)
        sys.exit(1)
    _daemonize()
    asyncio.run(_serve(listener, args.unix))


if __name__ == "__main__":
    main()
