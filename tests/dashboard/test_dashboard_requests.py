"""What the dashboard's Connect port reads of a request, and when (issue 31).

A real server process on loopback, called over raw HTTP/1.1 (`http.client`, which can send
the headers and a part of a body and then read the answer) and httpx. The server's memory is
read from /proc: its peak resident size (VmHWM), reset just before a request.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import select
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from service.dashboard.inbound import REQUEST_MAX_BYTES, REQUESTS_HELD_MAX_BYTES
from testing.server_process import ServerProcess, running
from tests.dashboard.support import dashboard_url
from tests.e2e.auth_support import ADMIN_TOKEN

pytestmark = pytest.mark.e2e

SERVICE = "rollout.v1.RolloutService"
_MIB = 1024 * 1024
_BIG_BODY_BYTES = 59 * _MIB
"""What the red team sent (issue 31): parsed for 112 s, the server's RSS to 1.09 GB."""
_INFLATED_BYTES = 32 * _MIB
"""A gzip bomb under the API's 64 MiB message limit: the old code inflated and parsed it."""
_PEAK_GROWTH_BOUND_BYTES = 16 * _MIB
"""Peak RSS growth allowed over one refused request: a quarter of the smallest body sent."""
_GUARD_S = 60.0
"""How long a raw request waits for its answer before failing (no answer: the old code)."""


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """No tokens (the loopback default); `dashboard.test` configured as a name."""
    yield from _serve(
        tmp_path_factory.mktemp("dashboard-open"),
        {"ROLLOUT_DASHBOARD_HOSTS": json.dumps(["Dashboard.Test"])},
    )


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from _serve(
        tmp_path_factory.mktemp("dashboard-tokens"),
        {"ROLLOUT_AUTH_TOKENS": json.dumps([ADMIN_TOKEN])},
    )


def _serve(folder: Path, env: Mapping[str, str]) -> Iterator[ServerProcess]:
    server = ServerProcess(folder / "state", env={"ROLLOUT_DASHBOARD_LISTEN": "127.0.0.1:0", **env})
    with running(server):
        yield server
    assert ADMIN_TOKEN not in server.text()


def _reset_peak(pid: int) -> int:
    """Reset the process's peak resident size to its resident size; returns that (bytes)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _status_bytes(pid, "VmRSS:")


def _status_bytes(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for pid {pid}")


def _post_part(
    server: ServerProcess, method: str, headers: Mapping[str, str], sent: bytes
) -> tuple[int, dict[str, object]]:
    """POST `headers` (a Content-Length among them, or chunked) and `sent` of the body, then
    read the answer without sending the rest."""
    url = urlsplit(dashboard_url(server))
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=_GUARD_S)
    try:
        connection.putrequest("POST", f"/{SERVICE}/{method}")
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        # A server that answers before it has read all of `sent` may close first: the answer
        # is still there to read.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            connection.send(sent)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def _hold_body(server: ServerProcess, size: int) -> http.client.HTTPConnection:
    """A POST that declares one byte more than `size` and sends `size`: a body held open."""
    url = urlsplit(dashboard_url(server))
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=_GUARD_S)
    connection.putrequest("POST", f"/{SERVICE}/ListRollouts")
    connection.putheader("content-type", "application/json")
    connection.putheader("content-length", str(size + 1))
    connection.endheaders()
    connection.send(b" " * size)
    return connection


def _call(
    server: ServerProcess, method: str, body: bytes, headers: Mapping[str, str] | None = None
) -> httpx.Response:
    headers = {"content-type": "application/json", **(headers or {})}
    with httpx.Client(base_url=dashboard_url(server), timeout=_GUARD_S) as client:
        return client.post(f"/{SERVICE}/{method}", content=body, headers=headers)


def _envelope(message: bytes, flags: int = 0) -> bytes:
    return bytes([flags]) + len(message).to_bytes(4, "big") + message


def test_a_big_body_without_a_token_is_refused_before_it_is_sent(
    token_server: ServerProcess,
) -> None:
    headers = {"content-type": "application/json", "content-length": str(_BIG_BODY_BYTES)}
    baseline = _reset_peak(token_server.pid)
    status, error = _post_part(
        token_server, "ListRollouts", headers, b'{"pageToken": "' + b"a" * _MIB
    )
    growth = _status_bytes(token_server.pid, "VmHWM:") - baseline

    assert status == 401
    assert error["code"] == "unauthenticated"
    assert "missing bearer token" in str(error["message"])
    assert growth < _PEAK_GROWTH_BOUND_BYTES, f"peak RSS grew {growth} bytes"


@pytest.mark.parametrize("length", ["declared", "chunked"])
def test_a_body_past_the_limit_is_refused_as_resource_exhausted(
    open_server: ServerProcess, length: str
) -> None:
    headers = {"content-type": "application/json"}
    if length == "declared":
        headers["content-length"] = str(_BIG_BODY_BYTES)
        sent = b""
    else:  # the limit is found while reading: one chunk of 2 MiB, and more to come
        headers["transfer-encoding"] = "chunked"
        sent = b"%x\r\n%s\r\n" % (2 * _MIB, b" " * (2 * _MIB))
    baseline = _reset_peak(open_server.pid)
    status, error = _post_part(open_server, "ListRollouts", headers, sent)
    growth = _status_bytes(open_server.pid, "VmHWM:") - baseline

    assert status == 429
    assert error["code"] == "resource_exhausted"
    assert "the request body is larger than the dashboard's limit" in str(error["message"])
    assert growth < _PEAK_GROWTH_BOUND_BYTES, f"peak RSS grew {growth} bytes"


def test_a_gzip_bomb_is_refused_as_resource_exhausted(open_server: ServerProcess) -> None:
    bomb = gzip.compress(b'{"padding": "' + b"a" * _INFLATED_BYTES + b'"}')
    baseline = _reset_peak(open_server.pid)
    refused = _call(open_server, "ListRollouts", bomb, {"content-encoding": "gzip"})
    growth = _status_bytes(open_server.pid, "VmHWM:") - baseline

    assert len(bomb) < _MIB
    assert refused.status_code == 429, refused.text
    assert refused.json()["code"] == "resource_exhausted"
    assert "inflated is larger than the dashboard's limit" in refused.json()["message"]
    assert growth < _PEAK_GROWTH_BOUND_BYTES, f"peak RSS grew {growth} bytes"


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:8080", "127.0.0.2"])
def test_a_host_that_is_not_the_dashboards_is_refused_without_tokens(
    open_server: ServerProcess, host: str
) -> None:
    refused = _call(open_server, "ListRollouts", b"{}", {"host": host})
    with httpx.Client(base_url=dashboard_url(open_server)) as client:
        page = client.get("/", headers={"host": host})

    assert refused.status_code == 403, refused.text
    assert refused.json()["code"] == "permission_denied"
    assert "ROLLOUT_DASHBOARD_HOSTS" in refused.json()["message"]
    assert page.status_code == 403
    assert "app.js" not in page.text


def test_a_host_that_is_not_the_dashboards_is_refused_with_a_valid_token(
    token_server: ServerProcess,
) -> None:
    token = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    refused = _call(token_server, "ListRollouts", b"{}", {**token, "host": "attacker.example"})
    listed = _call(token_server, "ListRollouts", b"{}", token)

    assert refused.status_code == 403, refused.text
    assert refused.json()["code"] == "permission_denied"
    assert listed.status_code == 200, listed.text


@pytest.mark.parametrize("host", ["localhost", "dashboard.test", "DASHBOARD.test."])
def test_the_listen_address_and_configured_names_are_answered(
    open_server: ServerProcess, host: str
) -> None:
    port = urlsplit(dashboard_url(open_server)).port
    listed = _call(open_server, "ListRollouts", b"{}", {"host": f"{host}:{port}"})
    by_address = _call(open_server, "ListRollouts", b"{}")

    assert listed.status_code == by_address.status_code == 200, listed.text


@pytest.mark.parametrize(
    ("content_type", "body", "expected"),
    [
        ("application/json", b'{"labels": 5', "Failed to load JSON"),
        ("application/json", b'{"pageSize": "many"}', "pageSize"),
        ("application/json", b"\xff\xfe", "rollout.v1.ListRolloutsRequest in json"),
        ("application/proto", b"\x0a\xff", "rollout.v1.ListRolloutsRequest in proto"),
    ],
)
def test_a_malformed_body_is_invalid_argument_naming_what_is_wrong(
    open_server: ServerProcess, content_type: str, body: bytes, expected: str
) -> None:
    refused = _call(open_server, "ListRollouts", body, {"content-type": content_type})

    assert refused.status_code == 400, refused.text
    assert refused.json()["code"] == "invalid_argument"
    assert expected in refused.json()["message"]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"\x00\x00", "an envelope starts with 5"),
        (_envelope(b"{}") + _envelope(b"{}"), "exactly one message"),
        (_envelope(b'{"rolloutId": 7'), "Failed to load JSON"),
        (_envelope(b"{}", flags=0x01), "not valid gzip"),
        (_envelope(b"{}", flags=0x02), "flags 0x02"),
    ],
)
def test_a_malformed_stream_request_ends_the_stream_invalid_argument(
    open_server: ServerProcess, body: bytes, expected: str
) -> None:
    headers = {"content-type": "application/connect+json", "connect-content-encoding": "gzip"}
    answer = _call(open_server, "WatchRollout", body, headers)
    end = answer.content

    assert answer.status_code == 200  # a stream's error is its end message
    assert end[0] == 0x02, end
    error = json.loads(end[5:])["error"]
    assert error["code"] == "invalid_argument"
    assert expected in error["message"]


def test_valid_calls_in_every_form_reach_the_api(open_server: ServerProcess) -> None:
    missing = json.dumps({"rolloutId": "no-such-rollout"}).encode()
    plain = _call(open_server, "GetRollout", missing)
    gzipped = _call(open_server, "GetRollout", gzip.compress(missing), {"content-encoding": "gzip"})
    listed = _call(open_server, "ListRollouts", b"{}")
    with httpx.Client(base_url=dashboard_url(open_server)) as client:
        got = client.get(f"/{SERVICE}/ListRollouts", params={"encoding": "json", "message": "{}"})
    headers = {"content-type": "application/connect+json", "connect-content-encoding": "gzip"}
    streamed = _call(open_server, "WatchRollout", _envelope(gzip.compress(missing), 1), headers)

    assert plain.status_code == gzipped.status_code == 404, plain.text
    assert (
        plain.json()
        == gzipped.json()
        == {
            "code": "not_found",
            "message": "no rollout 'no-such-rollout'",
        }
    )
    assert listed.status_code == got.status_code == 200, listed.text
    assert streamed.content[0] == 0x02
    assert json.loads(streamed.content[5:])["error"]["code"] == "not_found"


def test_bodies_held_open_across_calls_are_bounded_together(open_server: ServerProcess) -> None:
    """Each under its own limit, sixteen held bodies fill the budget: the next call is
    refused at once, and served again as soon as they go.

    A probe sent while the server still reads a holder's body may take the bytes that
    holder needed, so the holder is the one refused: that refusal is the budget's too, and
    the holder is replaced until the server has read all sixteen."""
    small = b'{"pageToken": ""}'.ljust(64)
    holders = [
        _hold_body(open_server, REQUEST_MAX_BYTES - 1)
        for _ in range(REQUESTS_HELD_MAX_BYTES // REQUEST_MAX_BYTES)
    ]
    refusals: list[tuple[int, dict[str, object]]] = []
    try:
        deadline = time.monotonic() + _GUARD_S
        refused = _call(open_server, "ListRollouts", small)
        while refused.status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.05)  # until the server has read what the holders sent
            for i, held in enumerate(holders):
                if select.select([held.sock], [], [], 0)[0]:
                    answer = held.getresponse()
                    refusals.append((answer.status, json.loads(answer.read())))
                    held.close()
                    holders[i] = _hold_body(open_server, REQUEST_MAX_BYTES - 1)
            refused = _call(open_server, "ListRollouts", small)
    finally:
        for holder in holders:
            holder.close()
    deadline = time.monotonic() + _GUARD_S
    served = _call(open_server, "ListRollouts", small)
    while served.status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.05)  # until the server has seen the holders go
        served = _call(open_server, "ListRollouts", small)

    assert refused.status_code == 429, (refused.text, refusals, open_server.text())
    assert refused.json()["code"] == "resource_exhausted"
    assert "bytes of requests at once" in refused.json()["message"]
    for status, error in refusals:
        assert status == 429, error
        assert "bytes of requests at once" in str(error["message"])
    assert served.status_code == 200, served.text
