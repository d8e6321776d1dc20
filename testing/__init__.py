"""What the tests (`tests/`) and the benchmarks (`bench/`) both use: a real server in a
subprocess (`server_process`), the fakes of what lives outside the machine, speaking the real
wire format (`fakes/`: LLM upstreams, E2B's cloud and envd, a public host), RolloutSpec
builders and agent commands (`specs`), a throwaway PostgreSQL (`postgres_server`) and stored
rollout samples (`samples`), the OpenEnv front door as a process (`front_door`) and E2B
backends on the fake cloud (`e2b_support`). It imports nothing of `tests/`, so a benchmark
never runs a test module's code (tests/test_layering.py); it is no part of the service's
distribution.
"""
