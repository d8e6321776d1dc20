"""An https upstream: the proxy verifies its certificate against the system's trust store."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from testing.fakes.llm_upstream import FakeUpstream, Reply
from tests.proxy.conftest import OpenRollout, chat


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for "localhost" and its key."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
async def tls_upstream(certificate: tuple[Path, Path]) -> AsyncIterator[tuple[FakeUpstream, Path]]:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    async with FakeUpstream(tls=context) as upstream:
        yield upstream, cert


async def test_a_trusted_certificate_is_accepted(
    tls_upstream: tuple[FakeUpstream, Path],
    open_rollout: OpenRollout,
    agent: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    upstream, cert = tls_upstream
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    upstream.script(Reply(text="over tls"))
    rollout = open_rollout(base_url=upstream.base_url)
    response = await agent.post(rollout.chat_url, json=chat("hi"), headers=rollout.headers)
    assert response.status_code == 200
    assert rollout.route.turns[0].completion_text == "over tls"


async def test_an_untrusted_certificate_is_an_upstream_failure(
    tls_upstream: tuple[FakeUpstream, Path], open_rollout: OpenRollout, agent: httpx.AsyncClient
) -> None:
    upstream, _ = tls_upstream
    rollout = open_rollout(base_url=upstream.base_url)
    response = await agent.post(rollout.chat_url, json=chat("hi"), headers=rollout.headers)
    assert response.status_code == 502
    assert "certificate verify failed" in response.json()["error"]["message"]
    assert upstream.requests == []
