"""verifiers' `Runtime` backed by a rollout-service session (docs/verifiers.md).

    from rollout_client.verifiers_runtime import SessionRuntime

    async with SessionRuntime({"task": {...}}, target="127.0.0.1:50051") as box:
        trace = await agent.run(task, runtime=box)

Needs the `verifiers` extra: `pip install 'rollout-client[verifiers]'`.
"""

from rollout_client.verifiers_runtime.runtime import (
    SessionRuntime,
    SessionRuntimeConfig,
    SessionRuntimeError,
    SessionRuntimeInfo,
)

__all__ = ["SessionRuntime", "SessionRuntimeConfig", "SessionRuntimeError", "SessionRuntimeInfo"]
