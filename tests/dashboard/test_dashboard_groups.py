"""The dashboard's groups page in a real browser (Debian's chromium under Playwright) against a
real server, and the API's rich errors over Connect: a group started after the page opened
appears on it while its members run and finishes there; a refused request's google.rpc
BadRequest reaches the page, which names each field.

The members are held in a model call by the fake upstream until the test releases them, so the
group is RUNNING for as long as the test needs; the page records every status the group's row
shows (a MutationObserver), so the test reads what the DOM went through.

`DASHBOARD_GROUPS_SCREENSHOT=docs/images/dashboard-groups.png pytest tests/dashboard -k
appears` writes the groups page as the group finished, for the docs.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterator

import httpx
import pytest
from google.rpc import error_details_pb2
from playwright.async_api import expect
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.fakes.llm_upstream import FakeUpstream, Reply
from testing.server_process import ServerProcess, running
from tests.dashboard.conftest import KEY, MODEL
from tests.dashboard.support import chromium, dashboard_url
from tests.e2e.group_support import call_model_then

pytestmark = pytest.mark.e2e
# What the page shows waits on a loaded machine's server and browser: room, never a timing.
expect.set_options(timeout=20_000)


# Every status the group's row shows, in order (rows are replaced as the group changes).
RECORD_ROW_STATUSES = """(groupId) => {
  window.seenStatuses = [];
  const body = document.querySelector("#groups tbody");
  const note = () => {
    const row = body.querySelector(`tr[data-group="${groupId}"]`);
    const text = row && row.dataset.status;
    if (text && window.seenStatuses.at(-1) !== text) window.seenStatuses.push(text);
  };
  note();
  new MutationObserver(note).observe(body, {childList: true, subtree: true, attributes: true});
}"""


@pytest.fixture(scope="module")
def dashboard_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("dashboard-groups"),
        env={"ROLLOUT_DASHBOARD_LISTEN": "127.0.0.1:0"},
    )
    with running(server):
        yield server


async def test_a_group_appears_on_the_groups_page_and_finishes_there(
    dashboard_server: ServerProcess,
    stub: pb_grpc.RolloutServiceAsyncStub,
    upstream: FakeUpstream,
) -> None:
    url = dashboard_url(dashboard_server)
    labels = {"suite": uuid.uuid4().hex}
    upstream.script(Reply(text="a held answer", hold=True), Reply(text="another", hold=True))
    member = pb.RolloutSpec(
        task=pb.Task(instruction="answer", verify=["test -s reply.txt"]),
        agent=pb.Agent(name="command", command=call_model_then("true")),
        endpoint=pb.Endpoint(base_url=upstream.base_url, api_key=KEY, model=MODEL),
        labels=labels,
    )
    async with chromium() as browser:
        page = await browser.new_page(viewport={"width": 1280, "height": 600})
        await page.goto(f"{url}#/groups?labels=suite%3D{labels['suite']}")
        await expect(page.locator("#groups")).to_be_visible()
        await expect(page.locator("#groups tbody tr")).to_have_count(0)

        started = await stub.StartGroup(pb.StartGroupRequest(spec=pb.GroupSpec(spec=member, n=2)))
        group_id = started.group.id
        await page.evaluate(RECORD_ROW_STATUSES, group_id)
        await upstream.wait_for_requests(2)  # both members wait in their model call
        row = page.locator(f'#groups tbody tr[data-group="{group_id}"]')
        await expect(row).to_have_attribute("data-status", "RUNNING")
        await expect(row.locator(".counted")).to_have_text("0/2")
        upstream.release()

        await expect(row).to_have_attribute("data-status", "COMPLETED", timeout=60_000)
        assert await page.evaluate("window.seenStatuses") == ["RUNNING", "COMPLETED"]
        await expect(row.locator(".counted")).to_have_text("2/2")
        await expect(row.locator(".members")).to_have_text("2")
        await expect(row.locator(".reward")).to_have_text("1.000")
        await expect(page.locator("#groups tbody tr")).to_have_count(1)
        if screenshot := os.environ.get("DASHBOARD_GROUPS_SCREENSHOT"):
            await page.screenshot(path=screenshot, full_page=True)

        await row.get_by_role("link", name=group_id).click()
        await expect(page.locator("#status")).to_have_text("COMPLETED")
        await expect(page.locator("#members tbody tr[data-status=SUCCEEDED]")).to_have_count(2)


async def test_the_group_page_counts_a_member_that_ended_while_another_runs(
    dashboard_server: ServerProcess,
    stub: pb_grpc.RolloutServiceAsyncStub,
    upstream: FakeUpstream,
) -> None:
    # The first model call is answered, the second held: one member ends while the other
    # waits in its call, so the group is RUNNING with one member counted.
    upstream.script(Reply(text="a quick answer"), Reply(text="a held answer", hold=True))
    member = pb.RolloutSpec(
        task=pb.Task(instruction="answer", verify=["test -s reply.txt"]),
        agent=pb.Agent(name="command", command=call_model_then("true")),
        endpoint=pb.Endpoint(base_url=upstream.base_url, api_key=KEY, model=MODEL),
        labels={"suite": uuid.uuid4().hex},
    )
    async with chromium() as browser:
        page = await browser.new_page()
        started = await stub.StartGroup(pb.StartGroupRequest(spec=pb.GroupSpec(spec=member, n=2)))
        group_id = started.group.id
        await page.goto(f"{dashboard_url(dashboard_server)}#/group/{group_id}")
        await expect(page.locator("#status")).to_have_text("RUNNING")

        await upstream.wait_for_requests(2)
        ended = page.locator("#members tbody tr[data-status=SUCCEEDED]")
        await expect(ended).to_have_count(1)
        await expect(ended.locator(".counted")).to_have_text("yes")
        await expect(ended.locator(".reward")).to_have_text("1.000")
        await expect(page.locator("#stats")).to_have_text(
            "1 counted, mean reward 1.000 (stddev 0.000), 0 refills"
        )
        held = page.locator("#members tbody tr[data-status=RUNNING]")
        await expect(held).to_have_count(1)
        await expect(held.locator(".counted")).to_have_text("no")
        assert await page.locator("#status").text_content() == "RUNNING"
        upstream.release()

        await expect(page.locator("#status")).to_have_text("COMPLETED", timeout=60_000)
        await expect(page.locator("#members tbody tr[data-status=SUCCEEDED]")).to_have_count(2)
        await expect(page.locator("#stats")).to_have_text(
            "2 counted, mean reward 1.000 (stddev 0.000), 0 refills"
        )


async def test_a_bad_page_token_comes_over_connect_with_its_bad_request_details(
    dashboard_server: ServerProcess,
) -> None:
    async with httpx.AsyncClient(base_url=dashboard_url(dashboard_server)) as client:
        refused = await client.post(
            "rollout.v1.RolloutService/ListGroups",
            json={"pageToken": "not-a-token"},
            headers={"content-type": "application/json"},
        )
    assert refused.status_code == 400
    error = refused.json()
    assert error["code"] == "invalid_argument"
    assert error["message"] == "page_token: not a next_page_token this server returned"
    [detail] = error["details"]
    assert detail["type"] == "google.rpc.BadRequest"
    bad_request = error_details_pb2.BadRequest.FromString(
        base64.b64decode(detail["value"] + "=" * (-len(detail["value"]) % 4))
    )
    assert [(v.field, v.description) for v in bad_request.field_violations] == [
        ("page_token", "not a next_page_token this server returned")
    ]


async def test_the_page_names_each_field_a_refused_request_had_wrong(
    dashboard_server: ServerProcess,
) -> None:
    too_long = "v" * 300
    async with chromium() as browser:
        page = await browser.new_page()
        await page.goto(f"{dashboard_url(dashboard_server)}#/groups?labels=team%3D{too_long}")
        await expect(page.locator("#error")).to_have_text(
            "InvalidArgument: the request was refused"
        )
        violations = page.locator("#violations li")
        await expect(violations).to_have_count(1)
        await expect(violations.first).to_have_attribute("data-field", "labels['team']")
        await expect(violations.first).to_have_text("labels['team']: exceeds 256 bytes")
