"""`make bench`: every benchmark in turn, each in its own process, figures printed as tables.

Each script also writes its JSON to bench/results/; docs/benchmarks.md quotes these figures.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHES = (
    ("sandbox floor: bwrap start vs a plain subprocess", ["bench_sandbox.py"]),
    ("a session's Exec through gRPC vs the sandbox's own exec", ["bench_session.py"]),
    (
        "no-op rollouts through gRPC: disk pool on and no quota vs pool off",
        ["bench_rollouts.py", "--compare", "--soak", "0"],
    ),
    ("a sandbox disk's own cost: pool on vs off", ["bench_rollouts.py", "--disk"]),
    (
        "a no-op rollout's CPU by process and by phase vs the sandbox's floor",
        ["bench_rollout_cpu.py"],
    ),
    ("server memory over a 5,000-rollout soak vs the baseline", ["bench_soak.py"]),
    ("WatchRollout fan-out: 1,000 and 10,000 watchers vs the baseline", ["bench_watchers.py"]),
    ("capture proxy overhead vs the upstream directly", ["bench_proxy.py"]),
    ("server memory around rollouts posting 3 x 60 MiB bodies", ["bench_proxy_memory.py"]),
    (
        "capture proxy overhead per dialect (Messages, Responses), native and translated",
        ["bench_dialects.py"],
    ),
    ("one opencode rollout, split by phase", ["bench_opencode.py"]),
    ("AGENT start to the first model call, per harness, warm vs cold", ["bench_agent_start.py"]),
    (
        "where opencode's start-up goes: run vs its baseline, and serve warmed",
        ["bench_opencode_start.py"],
    ),
    ("e2b backend (fake envd) vs local", ["bench_e2b.py"]),
    (
        "OpenEnv front door: a terminal step vs its Exec, run_rollout vs its RunRollout",
        ["bench_openenv.py"],
    ),
    (
        "Harbor: a trial through its environment vs RunRollout, its exec vs Exec",
        ["bench_harbor.py"],
    ),
    ("image store: base, cold build, cached rebuild", ["bench_images.py"]),
    ("sandboxes on an image vs on the host root", ["bench_image_sandbox.py"]),
    ("image builds: rootless vs root", ["bench_rootless_build.py"]),
    ("a group of 16 (set up once) vs 16 separate rollouts", ["bench_groups.py"]),
    ("pausing model calls: 200 rollouts mid-call, drained and released", ["bench_pause.py"]),
    (
        "scale: 600 rollouts on E2B over 3 replicas on PostgreSQL, ramped (--rollouts 10000)",
        ["bench_scale.py"],
    ),
    (
        "lease heartbeat age with the store's pool idle and busy, vs the pool heartbeat",
        ["bench_lease.py"],
    ),
    ("a ListGroups page over 10,000 groups vs a ListRollouts page", ["bench_list_groups.py"]),
)


def main() -> int:
    here = Path(__file__).parent
    failed = []
    for title, argv in BENCHES:
        print(f"\n## {title}\n", flush=True)
        code = subprocess.call([sys.executable, str(here / argv[0]), *argv[1:]])
        if code != 0:
            failed.append(argv[0])
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
