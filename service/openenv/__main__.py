"""`python -m service.openenv`: serve the OpenEnv environments against a rollout-service.

    python -m service.openenv [--listen 127.0.0.1:8000] [--target HOST:PORT]
                              [--token-file PATH] [--max-sessions 64]

The target defaults to $ROLLOUT_TARGET, else 127.0.0.1:50051; the token to the contents of
--token-file, else $ROLLOUT_TOKEN_FILE's, else $ROLLOUT_TOKEN (never a flag: argv shows in
`ps`). It checks the target and token first and exits 1 with one line if either is wrong;
once listening it prints `OpenEnv front door listening on http://HOST:PORT`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from pathlib import Path

from rollout_client import default_target, read_token_file

from service.openenv.upstream import FrontDoorError, RolloutTarget, check_reachable

__all__ = ["main"]


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m service.openenv", description=__doc__)
    parser.add_argument("--listen", default="127.0.0.1:8000", help="HOST:PORT (port 0: any)")
    parser.add_argument("--target", default=None, help="rollout-service's gRPC HOST:PORT")
    parser.add_argument("--token-file", type=Path, default=None, help="a file holding the token")
    parser.add_argument("--max-sessions", type=int, default=64, help="per environment")
    return parser.parse_args(argv)


def _token(token_file: Path | None) -> str | None:
    path = token_file or (
        Path(os.environ["ROLLOUT_TOKEN_FILE"]) if os.environ.get("ROLLOUT_TOKEN_FILE") else None
    )
    if path is not None:
        try:
            return read_token_file(path)
        except OSError as exc:
            raise FrontDoorError(f"cannot read the token file {path}: {exc.strerror}") from exc
    return os.environ.get("ROLLOUT_TOKEN") or None


def _bind(listen: str) -> socket.socket:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise FrontDoorError(f"--listen must be HOST:PORT, got {listen!r}")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, int(port)))
    except OSError as exc:
        sock.close()
        raise FrontDoorError(f"cannot listen on {listen}: {exc.strerror}") from exc
    # Listening before the line is printed: a client that reads it and connects at once is
    # queued until uvicorn accepts, never refused.
    sock.listen(2048)
    return sock


def main(argv: list[str] | None = None) -> int:
    arguments = _arguments(argv)
    try:
        upstream = RolloutTarget(arguments.target or default_target(), _token(arguments.token_file))
        check_reachable(upstream)
        sock = _bind(arguments.listen)
    except FrontDoorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    # Imported only now: openenv's server library takes seconds to import (gradio), and a
    # wrong target or token should be said at once.
    import uvicorn

    from service.openenv.app import ENVIRONMENTS, front_door_app

    host, port = sock.getsockname()[:2]
    app = front_door_app(upstream, arguments.max_sessions)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    shown = f"[{host}]" if ":" in host else host
    print(
        f"OpenEnv front door listening on http://{shown}:{port} "
        f"(environments: {', '.join('/' + name for name in ENVIRONMENTS)}; "
        f"rollout-service at {upstream.target})",
        flush=True,
    )
    asyncio.run(server.serve(sockets=[sock]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
