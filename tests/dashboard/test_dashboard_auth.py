"""The dashboard behind the API's security: HTTPS with the API's certificate, bearer tokens and
tenants exactly as the gRPC API judges them, and the API's rule for non-loopback addresses.

Calls are Connect's unary JSON form (what any Connect client sends), over httpx.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess, running
from testing.specs import command_spec
from tests.dashboard.support import dashboard_url
from tests.e2e.auth_support import (
    ADMIN_TOKEN,
    TENANT_A_TOKEN,
    TENANT_B_TOKEN,
    Certificates,
    bearer,
    make_certificates,
    write_token_file,
)

pytestmark = pytest.mark.e2e

SERVICE = "rollout.v1.RolloutService"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure_server(
    tmp_path_factory: pytest.TempPathFactory, certificates: Certificates
) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("dashboard-auth")
    server = ServerProcess(
        folder / "state",
        env={
            "ROLLOUT_DASHBOARD_LISTEN": "127.0.0.1:0",
            "ROLLOUT_AUTH_TOKEN_FILE": str(write_token_file(folder / "tokens")),
            "ROLLOUT_AUTH_TOKENS": json.dumps([f"{TENANT_B_TOKEN} tenant-b"]),
            "ROLLOUT_TLS_CERT_FILE": str(certificates.server_cert),
            "ROLLOUT_TLS_KEY_FILE": str(certificates.server_key),
        },
    )
    with running(server):
        yield server
    for token in (TENANT_A_TOKEN, TENANT_B_TOKEN, ADMIN_TOKEN):
        assert token not in server.text()


@pytest.fixture
async def stub(
    secure_server: ServerProcess, certificates: Certificates
) -> AsyncIterator[pb_grpc.RolloutServiceAsyncStub]:
    credentials = grpc.ssl_channel_credentials(certificates.ca.read_bytes())
    target = secure_server.target.replace("127.0.0.1", "localhost")
    async with grpc.aio.secure_channel(target, credentials) as channel:
        yield pb_grpc.RolloutServiceStub(channel)


@pytest.fixture
async def browser_like(
    secure_server: ServerProcess, certificates: Certificates
) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTPS client that trusts the test CA only, as a browser given that CA would."""
    trust = ssl.create_default_context(cafile=str(certificates.ca))
    async with httpx.AsyncClient(base_url=dashboard_url(secure_server), verify=trust) as client:
        yield client


async def call(
    client: httpx.AsyncClient, method: str, body: dict[str, Any], token: str | None
) -> httpx.Response:
    headers = {"content-type": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return await client.post(f"{SERVICE}/{method}", json=body, headers=headers)


async def test_a_missing_or_wrong_token_is_unauthenticated(
    browser_like: httpx.AsyncClient,
) -> None:
    page = await browser_like.get("/")
    missing = await call(browser_like, "ListRollouts", {}, None)
    wrong = await call(browser_like, "ListRollouts", {}, "tok-wrong-0000000000000")
    right = await call(browser_like, "ListRollouts", {}, ADMIN_TOKEN)

    assert page.status_code == 200
    assert "app.js" in page.text
    assert missing.status_code == wrong.status_code == 401
    assert missing.json()["code"] == wrong.json()["code"] == "unauthenticated"
    assert "missing bearer token" in missing.json()["message"]
    assert wrong.json()["message"] == "invalid bearer token"
    assert right.status_code == 200, right.text


async def test_a_tenant_sees_only_its_rollouts(
    browser_like: httpx.AsyncClient, stub: pb_grpc.RolloutServiceAsyncStub
) -> None:
    labels = {"run": "dashboard-tenants"}
    spec = command_spec("true", labels=labels)
    ours = await stub.StartRollout(
        pb.StartRolloutRequest(spec=spec), metadata=bearer(TENANT_A_TOKEN)
    )
    theirs = await stub.StartRollout(
        pb.StartRolloutRequest(spec=spec), metadata=bearer(TENANT_B_TOKEN)
    )

    listed = await call(browser_like, "ListRollouts", {"labels": labels}, TENANT_A_TOKEN)
    everyone = await call(browser_like, "ListRollouts", {"labels": labels}, ADMIN_TOKEN)
    own = await call(browser_like, "GetRollout", {"rolloutId": ours.rollout.id}, TENANT_A_TOKEN)
    other = await call(browser_like, "GetRollout", {"rolloutId": theirs.rollout.id}, TENANT_A_TOKEN)

    assert [r["id"] for r in listed.json()["rollouts"]] == [ours.rollout.id]
    assert {r["id"] for r in everyone.json()["rollouts"]} == {ours.rollout.id, theirs.rollout.id}
    assert own.json()["rollout"]["tenant"] == "tenant-a"
    assert other.status_code == 404
    assert other.json()["code"] == "not_found"


async def test_the_dashboard_speaks_only_tls_when_the_api_does(
    secure_server: ServerProcess,
) -> None:
    plain = dashboard_url(secure_server).replace("https://", "http://")
    assert dashboard_url(secure_server).startswith("https://")
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.HTTPError):
            await client.get(plain)


async def test_with_client_certificates_required_the_dashboard_requires_them_too(
    tmp_path: Path, certificates: Certificates
) -> None:
    server = ServerProcess(
        tmp_path / "state",
        env={
            "ROLLOUT_DASHBOARD_LISTEN": "127.0.0.1:0",
            "ROLLOUT_TLS_CERT_FILE": str(certificates.server_cert),
            "ROLLOUT_TLS_KEY_FILE": str(certificates.server_key),
            "ROLLOUT_TLS_CLIENT_CA_FILE": str(certificates.ca),
        },
    )
    server.start()
    try:
        url = dashboard_url(server)
        anonymous = ssl.create_default_context(cafile=str(certificates.ca))
        known = ssl.create_default_context(cafile=str(certificates.ca))
        known.load_cert_chain(str(certificates.client_cert), str(certificates.client_key))
        async with httpx.AsyncClient(base_url=url, verify=known) as client:
            listed = await call(client, "ListRollouts", {}, None)
        async with httpx.AsyncClient(base_url=url, verify=anonymous) as client:
            with pytest.raises(httpx.HTTPError):
                await call(client, "ListRollouts", {}, None)
    finally:
        assert server.stop() == 0, server.text()
    assert listed.status_code == 200, listed.text


@pytest.mark.parametrize("method", ["StartRollout", "CancelRollout", "RunGroup"])
async def test_the_dashboard_does_not_start_or_cancel_rollouts(
    browser_like: httpx.AsyncClient, method: str
) -> None:
    refused = await call(browser_like, method, {}, ADMIN_TOKEN)
    assert refused.status_code == 404


def test_a_dashboard_on_every_interface_without_tls_is_refused_naming_the_setting(
    tmp_path: Path,
) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "service.server"],
        env={
            **os.environ,
            "ROLLOUT_STATE_DIR": str(tmp_path / "state"),
            "ROLLOUT_LISTEN": "127.0.0.1:0",
            "ROLLOUT_DASHBOARD_LISTEN": "0.0.0.0:0",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert "ROLLOUT_DASHBOARD_LISTEN" in refused.stderr
    assert "ROLLOUT_TLS_CERT_FILE" in refused.stderr
    assert not (tmp_path / "state").exists()  # refused before opening anything
