"""Run by `test_session_runtime.py` under the verifiers interpreter (.venv-verifiers): the
released verifiers package's bash agent solving a task in a `SessionRuntime`.

    python driver.py '{"target": ..., "upstream": ..., "spec": {...}, "token": null}'

prints one JSON line: the verifiers trace's rewards and errors, then the session's
rollout-service reward; or, when the runtime fails to start, `{"start_error": "<line>"}`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import verifiers.v1 as vf
from rollout.v1 import rollout_pb2 as pb
from rollout_client.verifiers_runtime import SessionRuntime, SessionRuntimeError


class AnswerTask(vf.Task):
    """Scored by verifiers itself, reading the session's file through the runtime."""

    @vf.reward
    async def answer_is_42(self, runtime: vf.Runtime) -> float:
        return float((await runtime.read("answer.txt")).strip() == b"42")


async def main(args: dict[str, Any]) -> dict[str, Any]:
    agent = vf.Agent(
        vf.AgentConfig(
            model="fake-policy-8b",
            client=vf.EvalClientConfig(base_url=args["upstream"], api_key_var="UPSTREAM_KEY"),
            runtime=vf.SubprocessConfig(),  # the policy; the borrowed box below wins
        )
    )
    task = AnswerTask(vf.TaskData(prompt="Make answer.txt say 42."))
    box = SessionRuntime(
        args["spec"], target=args["target"], token=args.get("token"), python=sys.executable
    )
    try:
        await box.start()
    except SessionRuntimeError as exc:
        await box.stop()
        return {"start_error": str(exc)}
    try:
        trace = await agent.run(task, runtime=box)
        session = await box.verify()
    finally:
        await box.stop()
    return {
        "ok": trace.ok,
        "rewards": {name: r.value if r else None for name, r in trace.rewards.items()},
        "errors": [str(error) for error in trace.errors],
        "session_id": session.id,
        "session_status": pb.SessionStatus.Name(session.status),
        "session_reward": session.result.reward,
        "session_turns": session.result.turn_count,
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))), flush=True)
