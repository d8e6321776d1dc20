"""The dashboard in a real browser (Debian's chromium, headless, driven by Playwright) against a
real server: a rollout's page and the list page follow it live from QUEUED to SUCCEEDED.

The rollout is held in the queue deterministically: the server runs one rollout at a time and a
blocker rollout sits in a model call the fake upstream holds until the test releases it. The
page records every status its header shows (a MutationObserver), so the test reads what the
DOM went through, not a moment of it.

`DASHBOARD_SCREENSHOT=docs/images/dashboard.png pytest tests/dashboard -k queued` refreshes
the screenshot in the docs.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Page, expect
from prometheus_client.parser import text_string_to_metric_families
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream, Reply
from testing.server_process import ServerProcess, running
from tests.dashboard.conftest import KEY, MODEL
from tests.dashboard.support import chromium, dashboard_url

pytestmark = pytest.mark.e2e
# What the page shows waits on a loaded machine's server and browser: room, never a timing.
expect.set_options(timeout=20_000)

LABELS = {"suite": "dashboard"}

# A scripted agent: `count` chat calls (logprobs asked, so the page draws its sparklines).
CALL_MODEL = """python3 - <<'PY'
import json, os, urllib.request
for i in range(COUNT):
    body = {"model": os.environ["OPENAI_MODEL"], "logprobs": True,
            "messages": [{"role": "user", "content": f"MARKER {i}"}]}
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"})
    reply = json.load(urllib.request.urlopen(request, timeout=60))
    print(reply["choices"][0]["message"]["content"])
PY"""

# Every status the rollout page's header shows, in order, kept by the page itself.
RECORD_STATUSES = """() => {
  window.seenStatuses = [];
  const status = document.getElementById("status");
  const note = () => {
    const text = status.textContent;
    if (text && window.seenStatuses.at(-1) !== text) window.seenStatuses.push(text);
  };
  note();
  new MutationObserver(note).observe(status, {childList: true, characterData: true, subtree: true});
}"""


@pytest.fixture(scope="module")
def dashboard_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("dashboard-state"),
        env={
            "ROLLOUT_DASHBOARD_LISTEN": "127.0.0.1:0",
            "ROLLOUT_MAX_RUNNING": "1",
            "ROLLOUT_METRICS_LISTEN": "0",  # counts the open watch streams
        },
    )
    with running(server):
        yield server


def spec(upstream: FakeUpstream, marker: str, count: int) -> pb.RolloutSpec:
    command = CALL_MODEL.replace("MARKER", marker).replace("COUNT", str(count))
    return pb.RolloutSpec(
        task=pb.Task(instruction="answer twice", setup=["echo staged"], verify=["echo verified"]),
        agent=pb.Agent(name="command", command=command),
        endpoint=pb.Endpoint(base_url=upstream.base_url, api_key=KEY, model=MODEL),
        labels=LABELS,
    )


def is_blocker(body: Mapping[str, Any]) -> bool:
    return "blocker" in str(body.get("messages"))


async def test_pages_follow_a_rollout_from_queued_to_succeeded_with_its_turns(
    dashboard_server: ServerProcess,
    stub: pb_grpc.RolloutServiceAsyncStub,
    upstream: FakeUpstream,
) -> None:
    url = dashboard_url(dashboard_server)
    upstream.script(Reply(text="held until released", hold=True), match=is_blocker)
    upstream.script(Reply(text="first answer from the policy"), Reply(text="second answer"))
    blocker = await stub.StartRollout(pb.StartRolloutRequest(spec=spec(upstream, "blocker", 1)))
    await upstream.wait_for_requests(1)  # the blocker holds the only running slot
    started = await stub.StartRollout(pb.StartRolloutRequest(spec=spec(upstream, "watched", 2)))
    rollout_id = started.rollout.id

    async with chromium() as browser:
        listing = await browser.new_page()
        await listing.goto(f"{url}#/?labels=suite%3Ddashboard")
        rows = listing.locator("#rollouts tbody tr")
        await expect(row(listing, rollout_id)).to_have_attribute("data-status", "QUEUED")
        await expect(row(listing, blocker.rollout.id)).to_have_attribute("data-status", "RUNNING")

        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        await page.goto(f"{url}#/rollout/{rollout_id}")
        await expect(page.locator("#status")).to_have_text("QUEUED")
        await page.evaluate(RECORD_STATUSES)
        upstream.release()

        await expect(page.locator("#status")).to_have_text("SUCCEEDED", timeout=60_000)
        assert await page.evaluate("window.seenStatuses") == ["QUEUED", "RUNNING", "SUCCEEDED"]
        await expect(row(listing, rollout_id)).to_have_attribute("data-status", "SUCCEEDED")
        await expect(row(listing, blocker.rollout.id)).to_have_attribute("data-status", "SUCCEEDED")
        assert await rows.count() == 2

        got = await stub.GetRollout(pb.GetRolloutRequest(rollout_id=rollout_id))
        turns = got.rollout.result.turns
        assert len(turns) == 2
        turn_rows = page.locator("#turns tbody tr")
        await expect(turn_rows).to_have_count(2)
        for i, turn in enumerate(turns):
            cells = turn_rows.nth(i)
            await expect(cells.locator(".prompt-tokens")).to_have_text(
                str(turn.usage.prompt_tokens)
            )
            await expect(cells.locator(".completion-tokens")).to_have_text(
                str(turn.usage.completion_tokens)
            )
            await expect(cells.locator(".trainable")).to_have_text("yes")
            await expect(cells.locator("svg.sparkline polyline")).to_have_count(1)
        await expect(turn_rows.nth(0)).to_contain_text("first answer from the policy")
        await expect(page.locator("#timeline li[data-phase=AGENT]")).to_have_count(1)
        await expect(page.locator("#commands")).to_contain_text("staged")
        await expect(page.locator("#output")).to_contain_text("second answer")
        await page.screenshot(path=screenshot_path(dashboard_server.state_dir), full_page=True)


async def test_group_page_shows_members_as_they_finish(
    dashboard_server: ServerProcess, stub: pb_grpc.RolloutServiceAsyncStub
) -> None:
    member = pb.RolloutSpec(
        task=pb.Task(instruction="x", verify=["true"]),
        agent=pb.Agent(name="command", command="true"),
    )
    started = await stub.StartGroup(pb.StartGroupRequest(spec=pb.GroupSpec(spec=member, n=2)))
    group_id = started.group.id
    async with chromium() as browser:
        page = await browser.new_page()
        await page.goto(f"{dashboard_url(dashboard_server)}#/group/{group_id}")
        await expect(page.locator("#status")).to_have_text("COMPLETED", timeout=60_000)
        members = page.locator("#members tbody tr[data-status=SUCCEEDED]")
        await expect(members).to_have_count(2)
        await expect(members.first.locator(".reward")).to_have_text("1.000")


async def test_markup_an_agent_prints_is_shown_as_text(
    dashboard_server: ServerProcess, stub: pb_grpc.RolloutServiceAsyncStub
) -> None:
    """The agent is an adversary: what it prints reaches the page as text, never as markup."""
    markup = "<img id=injected src=x onerror=document.title='owned'>"
    hostile = pb.RolloutSpec(
        task=pb.Task(instruction="x", verify=[f'echo "{markup}"']),
        agent=pb.Agent(name="command", command=f'echo "{markup}"'),
        labels={"<b id=label>": "<b id=value>"},
    )
    response = await stub.RunRollout(pb.RunRolloutRequest(spec=hostile))
    async with chromium() as browser:
        page = await browser.new_page()
        await page.goto(f"{dashboard_url(dashboard_server)}#/rollout/{response.rollout.id}")
        await expect(page.locator("#status")).to_have_text("SUCCEEDED")
        await expect(page.locator("#output")).to_contain_text(markup)
        await expect(page.locator("#commands")).to_contain_text(markup)
        await expect(page.locator("#outcome dd.labels")).to_have_text("<b id=label>=<b id=value>")
        assert await page.locator("#injected, #label, #value").count() == 0
        assert await page.title() == "rollout-service"


async def test_a_page_left_ends_its_watch_on_the_server(dashboard_server: ServerProcess) -> None:
    """The list page's label watch waits on a label no rollout carries: no event would ever
    tell the server that the page is gone, only the closed connection."""
    async with chromium() as browser:
        page = await browser.new_page()
        await page.goto(f"{dashboard_url(dashboard_server)}#/?labels=suite%3Dnothing-here")
        await expect(page.locator("#rollouts")).to_be_visible()
        await until_watchers(dashboard_server, 1)
        await page.close()
        await until_watchers(dashboard_server, 0)
    assert "Error in ASGI" not in dashboard_server.text()


async def test_the_server_stops_while_a_page_watches_and_the_page_says_so(
    tmp_path: Path,
) -> None:
    env = {"ROLLOUT_DASHBOARD_LISTEN": "127.0.0.1:0", "ROLLOUT_METRICS_LISTEN": "0"}
    server = ServerProcess(tmp_path / "state", env=env)
    server.start()
    try:
        async with chromium() as browser:
            page = await browser.new_page()
            await page.goto(f"{dashboard_url(server)}#/")
            await expect(page.locator("#rollouts")).to_be_visible()
            await until_watchers(server, 1)
            code = await asyncio.to_thread(server.stop)
            await expect(page.locator("#error")).to_have_text(
                "Unavailable: the server is shutting down"
            )
    finally:
        server.stop()
    assert code == 0, server.text()


async def until_watchers(server: ServerProcess, count: int) -> None:
    """Scrape the server's metrics until it counts `count` open WatchRollout streams."""
    found = re.search(r"rollout-service metrics at (\S+)", server.text())
    assert found, server.text()
    seen = -1.0
    async with httpx.AsyncClient() as client:
        for _ in range(300):
            text = (await client.get(found.group(1))).text
            seen = sum(
                sample.value
                for family in text_string_to_metric_families(text)
                for sample in family.samples
                if sample.name == "rollout_watchers" and sample.labels["method"] == "WatchRollout"
            )
            if seen == count:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"{seen} WatchRollout streams open, never {count}")


def row(page: Page, rollout_id: str) -> Any:
    return page.locator(f'#rollouts tbody tr[data-rollout="{rollout_id}"]')


def screenshot_path(state_dir: Path) -> str:
    return os.environ.get("DASHBOARD_SCREENSHOT") or str(state_dir / "dashboard.png")
