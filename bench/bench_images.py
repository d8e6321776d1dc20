"""The image store: the Debian base, a cold build and a cached rebuild of a small Dockerfile.

The base is made in the server's cache at first use (mmdebstrap; reported if this run made it).
The cold build's context holds a fresh marker so it is a real build (buildah: FROM the base,
ENV, WORKDIR, COPY, RUN, USER; then the unpack of its root filesystem). Each cached rebuild
uses a new store on the same cache, as a restarted server would, and must be a hit on the
store's content key. Target: cached rebuild <= 1 s. The bench's images are removed and pruned
at the end. Prints a markdown table and writes bench/results/images.json.

    python bench/bench_images.py [-n 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.config import Settings
from service.images import ImageStore

RESULTS = Path(__file__).parent / "results"
DOCKERFILE = """\
FROM debian:bookworm
ARG FLAVOUR=plain
ENV GREETING=hi
WORKDIR /app
COPY marker.txt ./
RUN echo "$GREETING $FLAVOUR" > /app/out.txt && useradd -m bench
USER bench
"""
NAME = "bench/images"


async def timed_build(store: ImageStore, context: Path) -> float:
    began = time.perf_counter()
    await store.build(context, NAME)
    return time.perf_counter() - began


async def main(rounds: int) -> dict[str, dict[str, float]]:
    cache = Settings().cache_dir
    store = ImageStore(cache)
    began = time.perf_counter()
    await store.base()
    base_s = time.perf_counter() - began
    base_made = store.outcomes[-1].result == "built"
    figures = {
        "base (mmdebstrap + unpack)" if base_made else "base (cached)": {"n": 1, "s": base_s}
    }
    with tempfile.TemporaryDirectory(prefix="bench-images-") as scratch:
        context = Path(scratch)
        (context / "Dockerfile").write_text(DOCKERFILE)
        (context / "marker.txt").write_text(uuid.uuid4().hex)
        cold = await timed_build(store, context)
        assert store.outcomes[-1].result == "built", store.outcomes
        figures["cold build + unpack"] = {"n": 1, "s": cold}
        cached = []
        for _ in range(rounds):
            again = ImageStore(cache)
            cached.append(await timed_build(again, context))
            assert [o.result for o in again.outcomes] == ["hit"], again.outcomes
        cached.sort()
        figures["cached rebuild (new store)"] = {"n": rounds, "s": cached[len(cached) // 2]}
    await store.remove(NAME)
    await store.prune()
    return {name: {"n": row["n"], "s": round(row["s"], 3)} for name, row in figures.items()}


def report(results: dict[str, dict[str, float]]) -> str:
    lines = ["| case | n | seconds (median) |", "| --- | --- | --- |"]
    lines += [f"| {name} | {row['n']:.0f} | {row['s']} |" for name, row in results.items()]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--rounds", type=int, default=10, help="cached rebuilds")
    arguments = parser.parse_args()
    figures = asyncio.run(main(arguments.rounds))
    print(report(figures))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "images.json").write_text(json.dumps(figures, indent=2) + "\n")
