"""The OpenEnv front door: rollout-service behind OpenEnv's own HTTP and WebSocket server.

    an OpenEnv client (EnvClient, MCPToolClient, the seed's OpenCodeEnv), unchanged
      | HTTP /health /metadata /schema /reset /step /state /mcp, WebSocket /ws
    `python -m service.openenv`: openenv's server library (create_app), one app per environment
      /opencode_env   the seed's MCP tool `run_rollout`  -> RunRollout
      /terminal       reset / step / verify on a session -> the sessions RPCs
      | gRPC through rollout_client, bearer token, exactly like any other caller
    the rollout-service server

Why a process of its own that speaks gRPC, rather than a room the server hosts: the front door
is then one more client, so authentication, tenants, admission and errors are the API's own,
and its dependency (openenv, with FastAPI and gradio) stays out of the server, in the
`openenv` extra. No module here imports the engine or the API room (tests/test_layering.py).
What others use (the benchmarks) is exported here: the seed tool's arguments and the spec
they make, light enough (protobuf only) to import with the package, so no lazy door here.
"""

from service.openenv.opencode_task import RolloutArguments, spec_of

__all__ = ["RolloutArguments", "spec_of"]
