"""The Prometheus endpoint of a real server on loopback: Host check, scrape tokens, what it
exposes, and a flood of half-open requests that holds neither threads nor descriptors.

The flood's bound is a count read from /proc (the server's Threads and its open
descriptors), never a duration: the endpoint admits 32 connections, closes the others as
they arrive, and closes the admitted ones when no whole request came within its timeout.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testing.server_process import ServerProcess, running
from tests.e2e.auth_support import Certificates, make_certificates

pytestmark = pytest.mark.e2e

SCRAPE_TOKEN = "scrape-token-3f9a1c7e5b2d"
ADMITTED = 32
"""`metrics_port._MAX_CONNECTIONS`."""
FLOOD = 400
HALF_OPEN = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
"""A request whose headers never end."""
WAIT_S = 60.0
"""How long the flood test waits for the server to act before it gives up (no bound on it)."""


def metrics_url(server: ServerProcess) -> str:
    found = re.search(r"rollout-service metrics at (\S+)", server.text())
    assert found, server.text()
    return found.group(1)


def started(tmp_path: Path, env: dict[str, str]) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path / "state", env={"ROLLOUT_METRICS_LISTEN": "0", **env})
    with running(server):
        yield server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    yield from started(tmp_path, {})


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[ServerProcess]:
    """Scrape tokens and a configured name."""
    tokens = tmp_path / "scrape-tokens"
    tokens.write_text(f"# Prometheus\n{SCRAPE_TOKEN}\n")
    tokens.chmod(0o600)
    env = {
        "ROLLOUT_METRICS_TOKEN_FILE": str(tokens),
        "ROLLOUT_METRICS_HOSTS": '["rollout-metrics.example.internal"]',
    }
    yield from started(tmp_path, env)


def get(url: str, host: str | None = None, token: str | None = None) -> httpx.Response:
    headers = {} if host is None else {"Host": host}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.get(url, headers=headers)


def test_its_own_address_is_served_and_another_name_refused(server: ServerProcess) -> None:
    url = metrics_url(server)
    port = url.split(":")[2].split("/")[0]
    for host in (None, f"127.0.0.1:{port}", "localhost", f"LOCALHOST.:{port}"):
        served = get(url, host)
        assert served.status_code == 200, (host, served.text)
        assert "rollout_capacity_limit" in served.text
        assert served.headers["content-type"].startswith("text/plain; version=0.0.4")
    # A page of another site whose name was made to resolve to 127.0.0.1 sends its own name.
    for host in (f"attacker.example:{port}", "127.0.0.1.attacker.example", "10.1.2.3"):
        refused = get(url, host)
        assert refused.status_code == 421, (host, refused.text)
        assert "ROLLOUT_METRICS_HOSTS" in refused.text
        assert "rollout_" not in refused.text


def test_no_process_figures_are_exposed(server: ServerProcess) -> None:
    text = get(metrics_url(server)).text
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    assert names, text
    assert {name for name in names if not name.startswith("rollout_")} == {"target_info"}


def test_other_paths_and_methods_are_refused(server: ServerProcess) -> None:
    url = metrics_url(server)
    assert get(url.removesuffix("/metrics") + "/").status_code == 404
    assert httpx.post(url).status_code == 405


def test_a_scrape_needs_a_token_of_the_file(guarded: ServerProcess) -> None:
    url = metrics_url(guarded)
    missing = get(url)
    assert missing.status_code == 401
    assert "ROLLOUT_METRICS_TOKEN_FILE" in missing.text
    assert get(url, token="not-the-scrape-token-0000").status_code == 401
    assert "rollout_capacity_limit" in get(url, token=SCRAPE_TOKEN).text
    # The configured name is served; the Host check comes before the token.
    assert get(url, "rollout-metrics.example.internal:9464", SCRAPE_TOKEN).status_code == 200
    assert get(url, "attacker.example", SCRAPE_TOKEN).status_code == 421
    assert SCRAPE_TOKEN not in guarded.text()


def test_a_tenant_token_file_stops_the_server(tmp_path: Path) -> None:
    tokens = tmp_path / "scrape-tokens"
    tokens.write_text(f"{SCRAPE_TOKEN} team-a\n")
    refused = ServerProcess(
        tmp_path / "state",
        env={"ROLLOUT_METRICS_LISTEN": "0", "ROLLOUT_METRICS_TOKEN_FILE": str(tokens)},
    )
    with pytest.raises(RuntimeError, match=r"metrics_token_file .* a scrape token has no tenant"):
        refused.start()
    assert SCRAPE_TOKEN not in "".join(refused.output)


def threads_and_descriptors(pid: int) -> tuple[int, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
    return threads, len(os.listdir(f"/proc/{pid}/fd"))


def closed_by_server(connection: socket.socket) -> bool:
    try:
        return connection.recv(4096) == b""
    except ConnectionResetError:
        return True


def wait_for_closes(
    connections: list[socket.socket], want: int, over: tuple[int, int], pid: int
) -> tuple[int, int]:
    """Poll until the server closed `want` of `connections`, or its threads or descriptors
    pass `over`; returns the highest (threads, descriptors) seen."""
    open_ = list(connections)
    closed, highest = 0, (0, 0)
    deadline = time.monotonic() + WAIT_S
    while closed < want and time.monotonic() < deadline:
        readable, _, _ = select.select(open_, [], [], 0.1)
        for connection in readable:
            if closed_by_server(connection):
                open_.remove(connection)
                closed += 1
        now = threads_and_descriptors(pid)
        highest = (max(highest[0], now[0]), max(highest[1], now[1]))
        if highest[0] > over[0] or highest[1] > over[1]:
            break
    assert closed >= want or highest[0] > over[0] or highest[1] > over[1], (
        f"the server closed {closed} of the {want} connections it should have"
    )
    return highest


def test_half_open_requests_hold_no_thread_and_few_descriptors(server: ServerProcess) -> None:
    url = metrics_url(server)
    port = int(url.split(":")[2].split("/")[0])
    assert get(url).status_code == 200
    threads, descriptors = threads_and_descriptors(server.pid)
    bound = (threads + 2, descriptors + ADMITTED + 4)

    flood = [socket.create_connection(("127.0.0.1", port)) for _ in range(FLOOD)]
    try:
        for connection in flood:
            with contextlib.suppress(OSError):  # one closed on arrival
                connection.sendall(HALF_OPEN)
        # Those over the bound are closed on arrival; the admitted ones at their timeout.
        highest = wait_for_closes(flood, FLOOD - ADMITTED, bound, server.pid)
        assert highest[0] <= bound[0], f"threads {threads} -> {highest[0]} under {FLOOD} requests"
        assert highest[1] <= bound[1], (
            f"descriptors {descriptors} -> {highest[1]} under {FLOOD} requests"
        )
        highest = wait_for_closes(flood, FLOOD, bound, server.pid)
        assert highest[0] <= bound[0], highest
        assert highest[1] <= bound[1], highest
    finally:
        for connection in flood:
            connection.close()
    assert get(url).status_code == 200
    assert threads_and_descriptors(server.pid)[0] <= bound[0]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("pki"))


def test_with_the_apis_tls_it_speaks_only_https(tmp_path: Path, certs: Certificates) -> None:
    tls = {"ROLLOUT_TLS_CERT_FILE": str(certs.server_cert)}
    tls["ROLLOUT_TLS_KEY_FILE"] = str(certs.server_key)
    for server in started(tmp_path, tls):
        url = metrics_url(server)
        stalled = socket.create_connection(("127.0.0.1", int(url.split(":")[2].split("/")[0])))
        try:  # a handshake that never comes holds up no other scrape
            scraped = httpx.get(url, verify=ssl.create_default_context(cafile=certs.ca), timeout=5)
        finally:
            stalled.close()
        with pytest.raises(httpx.HTTPError):
            httpx.get(url.replace("https://", "http://"), timeout=5)

        assert url.startswith("https://127.0.0.1:"), url
        assert scraped.status_code == 200
        assert "rollout_capacity_limit" in scraped.text


def test_with_a_client_ca_a_scrape_needs_a_client_certificate(
    tmp_path: Path, certs: Certificates
) -> None:
    tls = {"ROLLOUT_TLS_CERT_FILE": str(certs.server_cert)}
    tls["ROLLOUT_TLS_KEY_FILE"] = str(certs.server_key)
    tls["ROLLOUT_TLS_CLIENT_CA_FILE"] = str(certs.ca)
    for server in started(tmp_path, tls):
        url = metrics_url(server)
        anonymous = ssl.create_default_context(cafile=certs.ca)
        with pytest.raises(httpx.HTTPError):
            httpx.get(url, verify=anonymous, timeout=5).raise_for_status()
        client = ssl.create_default_context(cafile=certs.ca)
        client.load_cert_chain(certs.client_cert, certs.client_key)
        scraped = httpx.get(url, verify=client, timeout=5)

        assert scraped.status_code == 200
