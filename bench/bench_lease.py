"""A replica's lease heartbeat while its store's connection pool is busy, against a baseline.

A `PostgresStore` (lease 3 s: a heartbeat every 0.5 s) on a throwaway PostgreSQL cluster
(`testing/postgres_server.py`); `--writers` tasks keep its pool busy with statements of
`--statement-s` each (as event writes on a loaded replica and database); the figure is the
worst age of the lease's heartbeat (now() - heartbeat_at, sampled every 20 ms for `--window`
s). Each scenario (pool idle, pool busy) runs in its own process against this tree and
against the code of `--baseline-ref` (the heartbeat through the pool), exported with
`git archive`, in the same run. Prints a markdown table and writes bench/results/lease.json.

    python bench/bench_lease.py [--writers 256] [--statement-s 0.2] [--window 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
LEASE_S = 3.0
BASELINE_REF = "1b0e14e"
"""The last commit whose heartbeat took a connection from the store's pool."""


async def _worst_age(url: str, writers: int, statement_s: float, window_s: float) -> float:
    """The worst heartbeat age seen while `writers` tasks keep the store's pool busy."""
    import psycopg

    from service.store import PostgresStore

    async with PostgresStore(url, server="bench", lease_s=LEASE_S) as store:
        stop = asyncio.Event()

        async def write() -> None:
            while not stop.is_set():
                async with store._pool.connection() as conn:  # type: ignore[union-attr]
                    await conn.execute("SELECT pg_sleep(%s)", (statement_s,))

        tasks = [asyncio.create_task(write()) for _ in range(writers)]
        await asyncio.sleep(LEASE_S / 3)
        worst = 0.0
        with psycopg.connect(url, autocommit=True) as conn:
            end = time.monotonic() + window_s
            while time.monotonic() < end:
                [(age,)] = conn.execute(
                    "SELECT extract(epoch FROM now() - heartbeat_at)::float FROM servers"
                ).fetchall()
                worst = max(worst, age)
                await asyncio.sleep(0.02)
        stop.set()
        await asyncio.gather(*tasks)
    return worst


def _measure(tree: Path, url: str, writers: int, statement_s: float, window_s: float) -> float:
    """One scenario in a fresh process running the store code of `tree`."""
    scenario = [str(writers), str(statement_s), str(window_s)]
    done = subprocess.run(
        [sys.executable, __file__, "--measure", str(tree), url, *scenario],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writers", type=int, default=256)
    parser.add_argument("--statement-s", type=float, default=0.2)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--baseline-ref", default=BASELINE_REF)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from testing.postgres_server import PostgresServer, postgres_bin_dir

    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL is not installed (apt-get install postgresql)")
    server = PostgresServer(bin_dir)
    server.start()
    figures: dict[str, dict[str, float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-lease-") as baseline:
            archive = subprocess.run(
                ["git", "archive", args.baseline_ref, "service"],
                cwd=ROOT,
                check=True,
                capture_output=True,
            )
            subprocess.run(["tar", "-x", "-C", baseline], input=archive.stdout, check=True)
            for code, tree in (("this", ROOT), ("baseline", Path(baseline))):
                for scenario, writers in (("idle", 0), ("busy", args.writers)):
                    worst = _measure(
                        tree, server.create_database(), writers, args.statement_s, args.window
                    )
                    figures.setdefault(code, {})[scenario] = worst
                    print(code, scenario, f"{worst:.3f}", flush=True)
    finally:
        server.stop()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "lease.json").write_text(json.dumps(figures, indent=2))
    print(
        f"\n{args.writers} writers x {args.statement_s} s statements on the 8-connection pool,"
        f" lease {LEASE_S:g} s (a beat every {LEASE_S / 6:g} s), worst heartbeat age over"
        f" {args.window:g} s:\n\n| code | pool idle | pool busy | busy / idle |\n|---|---|---|---|"
    )
    for code, ages in figures.items():
        ratio = ages["busy"] / ages["idle"]
        print(f"| {code} | {ages['idle']:.2f} s | {ages['busy']:.2f} s | {ratio:.2f} |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        tree, url, writers, statement_s, window_s = sys.argv[2:7]
        sys.path.insert(0, tree)
        age = asyncio.run(_worst_age(url, int(writers), float(statement_s), float(window_s)))
        print(age)
    else:
        main()
