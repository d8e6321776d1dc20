"""Through the real server: a batch of rollouts, then its Prometheus endpoint scraped.

Six rollouts of the command agent run at once: four call the (fake) model once each and
succeed, one of them answered without token ids; one fails its verify command; one fails
setup. A label watch stays open meanwhile. The scrape must hold exactly those counts: by
status and error kind, a phase histogram per phase with one observation per rollout that
entered it, the model calls and their tokens as the fake upstream sent them, and nothing
left live (sandboxes, queue, running slots, capacity) once the batch is over. A group whose
member's only model call fails is refilled, and the refill counted by that member's error kind.
Each test has a server of its own, so every count is exact.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_replies import Reply, TokenShape, prompt_ids_of
from testing.fakes.llm_upstream import FakeUpstream
from testing.server_process import ServerProcess, running
from testing.specs import command_spec
from tests.e2e.group_support import call_model_then, group_spec
from tests.e2e.processes import eventually

pytestmark = pytest.mark.e2e

UPSTREAM_KEY = "sk-metrics-upstream-4e1a"
UPSTREAM_MODEL = "fake-policy-metrics"
LABELS = {"suite": "metrics"}

CALL_MODEL = """python3 - <<'PY'
import json, os, urllib.request
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": os.environ["OPENAI_MODEL"],
                     "messages": [{"role": "user", "content": "count me"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
urllib.request.urlopen(request, timeout=30).read()
PY"""

WATCHERS = "rollout_watchers"

Samples = list[tuple[str, dict[str, str], float]]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server of the test's own, so that its counts are the test's alone."""
    server = ServerProcess(
        tmp_path / "state",
        # No warm sandbox, so that "live sandboxes" is the test's alone and ends at 0.
        env={"ROLLOUT_METRICS_LISTEN": "0", "ROLLOUT_LOCAL_WARM_SANDBOXES": "0"},
    )
    with running(server):
        yield server


@pytest.fixture
async def stub(server: ServerProcess) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


def metrics_url(server: ServerProcess) -> str:
    found = re.search(r"rollout-service metrics at (\S+)", server.text())
    assert found, server.text()
    assert found.group(1).startswith("http://127.0.0.1:")  # a bare port is loopback
    return found.group(1)


async def scrape(url: str) -> Samples:
    async with httpx.AsyncClient() as client:
        response = await client.get(url)
    response.raise_for_status()
    return [
        (sample.name, sample.labels, sample.value)
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    ]


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name`'s samples carrying `labels` (0 when there is none)."""
    return sum(
        v for n, got, v in samples if n == name and all(got.get(k) == w for k, w in labels.items())
    )


def series(samples: Samples, name: str, label: str) -> dict[str, float]:
    """`name`'s samples summed by one label."""
    totals: dict[str, float] = {}
    for n, labels, v in samples:
        if n == name:
            totals[labels.get(label, "")] = totals.get(labels.get(label, ""), 0.0) + v
    return totals


async def until(url: str, holds: Callable[[Samples], bool]) -> None:
    """Scrape until `holds` (a watch opens and closes on its own time); fail if it never does."""
    for _ in range(300):
        if holds(await scrape(url)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the scrape never showed it: {await scrape(url)}")


async def follow(stub: pb_grpc.RolloutServiceAsyncStub, watched: set[str]) -> None:
    """Note the rollout of every event of the label watch, until cancelled."""
    async for response in stub.WatchRollout(pb.WatchRolloutRequest(labels=LABELS)):
        watched.add(response.event.rollout_id)


async def test_a_batch_of_rollouts_is_counted_exactly(
    server: ServerProcess, stub: pb_grpc.RolloutServiceAsyncStub
) -> None:
    url = metrics_url(server)
    async with FakeUpstream(api_key=UPSTREAM_KEY, model=UPSTREAM_MODEL) as upstream:
        upstream.script(Reply(text="one"), Reply(text="two two"), Reply(text="three three three"))
        upstream.script(Reply(text="no ids here", shape=TokenShape.NONE))
        endpoint = {"baseUrl": upstream.base_url, "apiKey": UPSTREAM_KEY, "model": UPSTREAM_MODEL}
        specs = [command_spec(CALL_MODEL, verify=("true",), endpoint=endpoint) for _ in range(4)]
        specs.append(command_spec("true", verify=("false",)))
        specs.append(command_spec("true", setup=("exit 3",), verify=("true",)))
        for spec in specs:
            spec.labels.update(LABELS)

        watched: set[str] = set()
        watching = asyncio.create_task(follow(stub, watched))
        await until(url, lambda samples: value(samples, WATCHERS, method="WatchRollout") == 1)
        run = [stub.RunRollout(pb.RunRolloutRequest(spec=spec)) for spec in specs]
        rollouts = [response.rollout for response in await asyncio.gather(*run)]
        during = await scrape(url)
    await eventually(lambda: watched >= {r.id for r in rollouts})
    watching.cancel()
    assert watched == {r.id for r in rollouts}

    statuses = [(r.status, r.result.error.kind) for r in rollouts]
    assert statuses == [(pb.ROLLOUT_STATUS_SUCCEEDED, pb.ERROR_KIND_UNSPECIFIED)] * 5 + [
        (pb.ROLLOUT_STATUS_FAILED, pb.ERROR_KIND_SETUP)
    ], [r.result.error for r in rollouts]
    assert [r.result.reward for r in rollouts[3:5]] == [1.0, 0.0]

    started = "rollout_rollouts_started_total"
    assert value(during, started, agent="command", backend="local") == 6
    finished = "rollout_rollouts_finished_total"
    assert series(during, finished, "status") == {"succeeded": 5, "failed": 1}
    assert series(during, finished, "error_kind") == {"": 5, "setup": 1}

    entered = {
        "queued": 6,
        "creating_sandbox": 6,
        "preparing_agent": 6,
        "setup": 6,
        "agent": 5,
        "verifying": 5,
        "collecting": 5,
        "teardown": 6,
    }
    assert series(during, "rollout_phase_duration_seconds_count", "phase") == entered
    for phase, count in entered.items():
        every = value(during, "rollout_phase_duration_seconds_bucket", phase=phase, le="+Inf")
        assert every == count
        assert value(during, "rollout_phase_duration_seconds_sum", phase=phase) > 0

    # The model calls: one per calling rollout, tokens as the fake counted them.
    assert len(upstream.sent) == 4
    calls = "rollout_proxy_calls_total"
    assert value(during, calls, dialect="chat_completions", failed="false") == 4
    assert value(during, calls, failed="true") == 0
    assert value(during, "rollout_proxy_call_duration_seconds_count") == 4
    prompt = sum(len(prompt_ids_of(r.body["messages"])) for r in upstream.requests if r.body)
    completion = sum(len(sent.tokens) for sent in upstream.sent)
    assert (prompt, completion) == (4, 1 + 2 + 3 + 3)
    tokens = "rollout_proxy_tokens_total"
    assert value(during, tokens, token_type="prompt") == prompt
    assert value(during, tokens, token_type="completion") == completion
    missing = "rollout_proxy_turns_missing_tokens_total"
    assert series(during, missing, "missing") == {"token_ids": 1}
    assert sum(not t.token_ids_present for r in rollouts for t in r.result.turns) == 1

    # Nothing is left live; the watch was open during the batch and is closed after it.
    assert value(during, "rollout_sandboxes_live", backend="local") == 0
    assert value(during, "rollout_queue_depth") == 0
    assert value(during, "rollout_rollouts_running") == 0
    assert value(during, "rollout_capacity_used") == 0
    assert value(during, "rollout_capacity_limit") == 8 + 256
    assert value(during, WATCHERS, method="WatchRollout") == 1
    await until(url, lambda samples: value(samples, WATCHERS, method="WatchRollout") == 0)


async def test_a_group_refill_is_counted_by_the_kind_that_failed_the_member(
    server: ServerProcess, stub: pb_grpc.RolloutServiceAsyncStub
) -> None:
    async with FakeUpstream(model=UPSTREAM_MODEL) as upstream:
        upstream.script(Reply(status=503))  # one member's only call: UPSTREAM_LLM, refilled
        endpoint = {"baseUrl": upstream.base_url, "model": UPSTREAM_MODEL}
        spec = command_spec(call_model_then("true"), verify=("true",), endpoint=endpoint)
        group = (await stub.RunGroup(pb.RunGroupRequest(spec=group_spec(spec, 2)))).group
    assert (group.status, group.stats.refills) == (pb.GROUP_STATUS_COMPLETED, 1), group

    samples = await scrape(metrics_url(server))
    assert series(samples, "rollout_group_refills_total", "error_kind") == {"upstream_llm": 1}
    assert value(samples, "rollout_rollouts_started_total") == 3
    finished = "rollout_rollouts_finished_total"
    assert series(samples, finished, "error_kind") == {"": 2, "upstream_llm": 1}
    calls = "rollout_proxy_calls_total"
    assert (value(samples, calls, failed="true"), value(samples, calls, failed="false")) == (1, 2)
    assert value(samples, "rollout_capacity_used") == 0  # the group's reservation given back


def test_the_endpoint_is_refused_off_loopback_and_in_use(tmp_path: Path) -> None:
    refused = ServerProcess(tmp_path / "a", env={"ROLLOUT_METRICS_LISTEN": "0.0.0.0:0"})
    with pytest.raises(RuntimeError, match=r"0\.0\.0\.0:0 \(ROLLOUT_METRICS_LISTEN"):
        refused.start()
