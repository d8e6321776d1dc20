"""The capture proxy as its own process (inside a remote sandbox), serving one route.

    ROLLOUT_PROXY_API_KEY=... python -m service.proxy.remote.standalone \\
        --listen 127.0.0.1:8765 --base-url http://host:8000/v1 --model M \\
        --token T --turns-file /tmp/turns.jsonl

Once listening it prints one JSON line on stderr, `{"ready": true, "base_url": ...}` (the
route's base URL, token included), and then writes every completed turn as one JSON line
(a `Turn`, as `Turn.model_validate_json` reads it), flushed at once, to `--turns-file`
(default: stdout) so a remote service can follow it live. SIGTERM or SIGINT stops it.

The upstream API key is read ONLY from the environment (ROLLOUT_PROXY_API_KEY, or the
shorthand's own variable with `--kind`), never from argv, where `ps` would show it. Flags
also fall back to ROLLOUT_PROXY_<FLAG> variables (e.g. ROLLOUT_PROXY_BASE_URL).

Needs: Python 3.11, httptools, orjson, pydantic (uvloop optional, used when installed),
and these parts of the service: `service/__init__.py`, `service/errors.py`,
`service/models/`, `service/proxy/`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Mapping
from typing import IO, Any

import orjson
from pydantic import BaseModel

from service.errors import SpecError
from service.models import CaptureSpec, DialectMode, EndpointSpec, Sampling, Turn
from service.proxy.core import ProxyCore, base_url, split_listen
from service.proxy.endpoints import ResolvedEndpoint, resolve_endpoint

__all__ = ["API_KEY_ENV", "OnTurnWriter", "main"]

API_KEY_ENV = "ROLLOUT_PROXY_API_KEY"
_ENV_PREFIX = "ROLLOUT_PROXY_"


def _parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    def default(flag: str, fallback: str = "") -> str:
        return environ.get(_ENV_PREFIX + flag.upper().replace("-", "_"), fallback)

    parser = argparse.ArgumentParser(description="Standalone LLM capture proxy (one route).")
    parser.add_argument("--listen", default=default("listen", "127.0.0.1:0"), help="HOST:PORT")
    parser.add_argument("--kind", default=default("kind"), help="endpoint shorthand (vllm, ...)")
    parser.add_argument("--base-url", default=default("base-url"), help="upstream API base URL")
    parser.add_argument("--model", default=default("model"), help="model sent upstream")
    parser.add_argument("--token", default=default("token"), help="route token (default: random)")
    parser.add_argument("--rollout-id", default=default("rollout-id", "standalone"))
    parser.add_argument("--turns-file", default=default("turns-file", "-"), help="'-' = stdout")
    parser.add_argument("--top-logprobs", type=int, default=int(default("top-logprobs", "1")))
    parser.add_argument("--max-tokens-cap", type=int, default=int(default("max-tokens-cap", "0")))
    parser.add_argument(
        "--disable-thinking",
        action="store_true",
        default=default("disable-thinking").lower() in ("1", "true", "yes"),
    )
    parser.add_argument(
        "--dialect-mode",
        choices=[mode.value for mode in DialectMode],
        default=default("dialect-mode", DialectMode.TRANSLATED.value),
        help="how Responses and Messages calls reach the upstream",
    )
    parser.add_argument(
        "--sampling",
        default=default("sampling", "{}"),
        help="JSON: the Sampling fields (seed, temperature, top_p, top_k, ...)",
    )
    parser.add_argument(
        "--upstream-timeout-s", type=float, default=float(default("upstream-timeout-s", "600"))
    )
    return parser


def _resolve(args: argparse.Namespace, environ: Mapping[str, str]) -> ResolvedEndpoint:
    spec = EndpointSpec(
        kind=args.kind,
        base_url=args.base_url,
        model=args.model,
        api_key=environ.get(API_KEY_ENV, ""),
        dialect_mode=DialectMode(args.dialect_mode),
    )
    return resolve_endpoint(spec, environ)


class OnTurnWriter:
    """Writes each turn as one flushed JSON line.

    `prompt_ids_json` (`Route.prompt_ids_json`) gives the upstream's own bytes for a turn's
    prompt ids, spliced in as they are: serialising ~12k ints again cost more than the
    rest of the turn."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self.prompt_ids_json: Callable[[Turn], bytes | None] = lambda turn: None

    def __call__(self, turn: Turn) -> None:
        self._out.write(self._line(turn))
        self._out.flush()

    def _line(self, turn: Turn) -> bytes:
        # orjson over the model's fields: the same JSON as model_dump_json, several times faster.
        raw = self.prompt_ids_json(turn)
        if raw is None or b"\n" in raw or b"\r" in raw:
            return orjson.dumps(turn, default=_fields, option=orjson.OPT_APPEND_NEWLINE)
        fields = {k: v for k, v in turn.__dict__.items() if k != "prompt_token_ids"}
        head = orjson.dumps(fields, default=_fields)
        return b"".join((head[:-1], b',"prompt_token_ids":[', raw, b"]}\n"))


def _fields(value: object) -> dict[str, Any]:
    if isinstance(value, BaseModel):
        return value.__dict__
    raise TypeError(f"cannot serialise {type(value).__name__}")


async def _serve(args: argparse.Namespace, upstream: ResolvedEndpoint, out: IO[bytes]) -> None:
    core = ProxyCore(upstream_timeout_s=args.upstream_timeout_s)
    capture = CaptureSpec(
        top_logprobs=args.top_logprobs,
        max_tokens_cap=args.max_tokens_cap,
        disable_thinking=args.disable_thinking,
        sampling=Sampling.model_validate_json(args.sampling),
    )
    writer = OnTurnWriter(out)
    token = args.token or None
    route = core.open_route(
        args.rollout_id, upstream, capture, writer, token=token, keep_turns=False
    )
    writer.prompt_ids_json = route.prompt_ids_json
    host, port = split_listen(args.listen)
    bound = await core.serve_tcp(host, port)
    ready = {"ready": True, "base_url": f"{base_url(host, bound)}/r/{route.token}/v1"}
    print(json.dumps(ready), file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await core.close()


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run on uvloop when it is installed (about twice as fast here), else asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def main(argv: list[str] | None = None, environ: Mapping[str, str] = os.environ) -> None:
    args = _parser(environ).parse_args(argv)
    try:
        upstream = _resolve(args, environ)
    except SpecError as exc:
        sys.exit(f"standalone proxy: {exc}")
    with contextlib.ExitStack() as stack:
        turns_file = args.turns_file
        out = (
            sys.stdout.buffer if turns_file == "-" else stack.enter_context(open(turns_file, "ab"))
        )
        _run(_serve(args, upstream, out))


if __name__ == "__main__":
    main()
