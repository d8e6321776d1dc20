"""One small Dockerfile built by a root store and by a rootless one (an unprivileged server's).

Root's store is the server's cache; the rootless one runs as a user this bench makes, in a
state directory of its own, with the cache's `images/` bound read-only into its cache (as the
unprivileged test and a Kubernetes pod have it). Each round is a cold build (a fresh marker in
the context: COPY and RUN run) plus the unpack of its root filesystem, by a new store as a
restarted server would; the rootless store's first use also imports the base made ahead
(reported on its own row). Figures are medians; the ratio is rootless over root in this run.
Needs root (it makes the user); the user, its directories and the bench's images are removed
at the end. Prints a markdown table and writes bench/results/rootless_build.json.

    python bench/bench_rootless_build.py [-n 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_images import report
from service.config import Settings
from service.images import ImageStore

RESULTS = Path(__file__).parent / "results"
DOCKERFILE = """\
FROM rollout/base
WORKDIR /app
COPY marker.txt ./
RUN apt-get --version | head -1 > /app/apt.txt && cat marker.txt > /app/out.txt
"""
NAME = "bench/rootless-build"


async def rounds(store: ImageStore, context: Path, count: int) -> dict[str, list[float]]:
    """`count` cold builds (+ unpack) of `context`, each by a new store like `store`; the first
    use of the base (made, imported or a hit) timed on its own."""
    began = time.perf_counter()
    await store.base()
    times: dict[str, list[float]] = {"base": [time.perf_counter() - began], "build": []}
    for _ in range(count):
        (context / "marker.txt").write_text(uuid.uuid4().hex)
        again = ImageStore(store.shared.parent, rootless=_rootless_dir(store))
        began = time.perf_counter()
        await again.build(context, NAME)
        times["build"].append(time.perf_counter() - began)
        assert [o.result for o in again.outcomes][-1] == "built", again.outcomes
    return times


def _rootless_dir(store: ImageStore) -> Path | None:
    return store.directory.parent if store.storage.rootless else None


def _context(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "Dockerfile").write_text(DOCKERFILE)
    return directory


def child(cache: Path, state: Path, count: int) -> None:
    """The rootless side, run as the bench's user: timings as JSON on stdout."""
    store = ImageStore(cache, rootless=state / "rootless")
    print(json.dumps(asyncio.run(rounds(store, _context(state / "context"), count))))


def _as_user(user: pwd.struct_passwd) -> list[str]:
    return [
        "setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--",
    ]  # fmt: skip


def rootless_times(count: int) -> dict[str, list[float]]:
    name = f"rollout-bench-{uuid.uuid4().hex[:6]}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
    home = Path(tempfile.mkdtemp(prefix="rollout-bench-rootless-", dir="/tmp"))
    try:
        user = pwd.getpwnam(name)
        for path in (home, home / "state", home / "cache", home / "cache/images"):
            path.mkdir(exist_ok=True)
            os.chown(path, user.pw_uid, user.pw_gid)
        shared = ImageStore(Settings().cache_dir).directory
        mount = f'mount --bind -o ro {shared} {home / "cache/images"} && exec "$@"'
        argv = [
            "unshare", "--mount", "--propagation=private", "--", "sh", "-c", mount, "sh",
            *_as_user(user), sys.executable, __file__, "--child", str(home / "cache"),
            str(home / "state"), str(count),
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, env={"HOME": str(home)})
        if done.returncode != 0:
            raise SystemExit(f"the rootless side failed:\n{done.stderr[-4000:]}")
        times: dict[str, list[float]] = json.loads(done.stdout.splitlines()[-1])
        return times
    finally:
        shutil.rmtree(home, ignore_errors=True)
        subprocess.run(["userdel", name], check=True)


async def root_times(count: int) -> dict[str, list[float]]:
    store = ImageStore(Settings().cache_dir)
    with tempfile.TemporaryDirectory(prefix="bench-rootless-build-") as scratch:
        times = await rounds(store, _context(Path(scratch)), count)
    await store.remove(NAME)
    await store.prune()
    return times


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main(count: int) -> dict[str, dict[str, float]]:
    root = asyncio.run(root_times(count))
    rootless = rootless_times(count)
    build_root, build_rootless = _median(root["build"]), _median(rootless["build"])
    return {
        "root: cold build + unpack": {"n": count, "s": round(build_root, 2)},
        "rootless: cold build + unpack": {"n": count, "s": round(build_rootless, 2)},
        "rootless: base import, first use": {"n": 1, "s": round(rootless["base"][0], 2)},
        "ratio rootless / root (build)": {"n": count, "s": round(build_rootless / build_root, 2)},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--rounds", type=int, default=3, help="cold builds per side")
    parser.add_argument("--child", nargs=3, metavar=("CACHE", "STATE", "ROUNDS"), help="inner")
    arguments = parser.parse_args()
    if arguments.child:
        cache, state, count = arguments.child
        child(Path(cache), Path(state), int(count))
        sys.exit(0)
    figures = main(arguments.rounds)
    print(report(figures))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "rootless_build.json").write_text(json.dumps(figures, indent=2) + "\n")
