"""`python -m service.images`: the operator's command for the image store (server-side only).

    python -m service.images base                       make the Debian base (mmdebstrap)
    python -m service.images import SOURCE --name NAME [--image REF]
                                                        OCI layout / archive / docker://;
                                                        REF: which image of an archive
    python -m service.images build CONTEXT --name NAME [-f DOCKERFILE] [--build-arg K=V ...]
    python -m service.images get NAME                   unpack; print the rootfs and config
    python -m service.images list
    python -m service.images remove NAME
    python -m service.images prune [--all]

The cache is the server's (`ROLLOUT_CACHE_DIR`); run by another user than root, the store is
that user's rootless one under `ROLLOUT_STATE_DIR` (an unprivileged server's: `base` then
imports the base root made ahead). Progress lines go to stderr, results to stdout as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from pydantic import BaseModel

from service.config import Settings
from service.errors import ConfigError, ImageError
from service.images.models import ImageProgress
from service.images.store import ImageStore

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m service.images", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("base", help="make the Debian base image")
    importer = commands.add_parser("import", help="import an OCI image")
    importer.add_argument("source")
    importer.add_argument("--name", required=True)
    importer.add_argument(
        "--image", default="", metavar="REF", help="the image to take from a multi-image archive"
    )
    build = commands.add_parser("build", help="build a Dockerfile")
    build.add_argument("context", type=Path)
    build.add_argument("--name", required=True)
    build.add_argument("-f", "--file", type=Path, default=None)
    build.add_argument("--build-arg", action="append", default=[], metavar="KEY=VALUE")
    commands.add_parser("get", help="unpack an image; print it").add_argument("name")
    commands.add_parser("list", help="list images")
    commands.add_parser("remove", help="drop an image's name").add_argument("name")
    commands.add_parser("prune", help="free space").add_argument("--all", action="store_true")
    return parser


def _progress(progress: ImageProgress) -> None:
    print(f"[{progress.image}] {progress.step}: {progress.message}", file=sys.stderr, flush=True)


async def _run(args: argparse.Namespace, store: ImageStore) -> object:
    if args.command == "base":
        return await store.base(_progress)
    if args.command == "import":
        return await store.import_oci(args.source, args.name, _progress, select=args.image)
    if args.command == "build":
        build_args = dict(item.partition("=")[::2] for item in args.build_arg)
        return await store.build(
            args.context, args.name, dockerfile=args.file, build_args=build_args,
            on_progress=_progress,
        )  # fmt: skip
    if args.command == "get":
        return await store.get(args.name, _progress)
    if args.command == "list":
        return await store.list()
    if args.command == "remove":
        await store.remove(args.name)
        return None
    return await store.prune(everything=args.all)


def _json(result: object) -> str:
    if isinstance(result, list):
        return json.dumps([item.model_dump(mode="json") for item in result], indent=2)
    if isinstance(result, BaseModel):
        return result.model_dump_json(indent=2)
    return "null"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = Settings()
    try:
        store = ImageStore.of_server(settings)
        result = asyncio.run(_run(args, store))
    except (ImageError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(_json(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
