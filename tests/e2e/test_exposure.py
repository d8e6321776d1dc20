"""TLS, client certificates, and the refusal to serve a non-loopback address unprotected,
against a real server (certificates from a private CA made for the test)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc as pb_grpc

from testing.server_process import ServerProcess
from tests.e2e.auth_support import (
    TENANT_A_TOKEN,
    Certificates,
    bearer,
    make_certificates,
    write_token_file,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("pki"))


def tls_env(certs: Certificates, *, client_ca: bool = False) -> dict[str, str]:
    env = {
        "ROLLOUT_TLS_CERT_FILE": str(certs.server_cert),
        "ROLLOUT_TLS_KEY_FILE": str(certs.server_key),
    }
    if client_ca:
        env["ROLLOUT_TLS_CLIENT_CA_FILE"] = str(certs.ca)
    return env


def local_target(server: ServerProcess) -> str:
    """The server's address as a client on this machine dials it."""
    return "127.0.0.1:" + server.target.rsplit(":", 1)[1]


async def list_call(
    target: str,
    credentials: grpc.ChannelCredentials | None,
    metadata: tuple[tuple[str, str], ...] = (),
) -> pb.ListRolloutsResponse:
    channel = (
        grpc.aio.insecure_channel(target)
        if credentials is None
        else grpc.aio.secure_channel(target, credentials)
    )
    async with channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        return await stub.ListRollouts(pb.ListRolloutsRequest(), metadata=metadata, timeout=20)


def refused_start(tmp_path: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a server that must refuse to start; its exit and output."""
    return subprocess.run(
        [sys.executable, "-m", "service.server"],
        env={**os.environ, "ROLLOUT_STATE_DIR": str(tmp_path / "state"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_tls_serves_a_client_that_trusts_the_ca_only(
    tmp_path: Path, certificates: Certificates
) -> None:
    server = ServerProcess(tmp_path / "state", env=tls_env(certificates))
    server.start()
    try:
        trusted = grpc.ssl_channel_credentials(certificates.ca.read_bytes())
        untrusted = grpc.ssl_channel_credentials(certificates.other_ca.read_bytes())
        listed = await list_call(server.target, trusted)
        with pytest.raises(grpc.aio.AioRpcError) as wrong_ca:
            await list_call(server.target, untrusted)
        with pytest.raises(grpc.aio.AioRpcError) as plaintext:
            await list_call(server.target, None)
    finally:
        assert server.stop() == 0, server.text()

    assert isinstance(listed, pb.ListRolloutsResponse)
    assert wrong_ca.value.code() == grpc.StatusCode.UNAVAILABLE
    assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "API security: TLS on; no bearer tokens" in server.text()


async def test_mtls_refuses_a_client_without_a_certificate(
    tmp_path: Path, certificates: Certificates
) -> None:
    server = ServerProcess(tmp_path / "state", env=tls_env(certificates, client_ca=True))
    server.start()
    ca = certificates.ca.read_bytes()
    with_cert = grpc.ssl_channel_credentials(
        ca, certificates.client_key.read_bytes(), certificates.client_cert.read_bytes()
    )
    stranger = grpc.ssl_channel_credentials(
        ca, certificates.stranger_key.read_bytes(), certificates.stranger_cert.read_bytes()
    )
    try:
        listed = await list_call(server.target, with_cert)
        with pytest.raises(grpc.aio.AioRpcError) as without:
            await list_call(server.target, grpc.ssl_channel_credentials(ca))
        with pytest.raises(grpc.aio.AioRpcError) as untrusted:
            await list_call(server.target, stranger)
    finally:
        assert server.stop() == 0, server.text()

    assert isinstance(listed, pb.ListRolloutsResponse)
    assert without.value.code() == grpc.StatusCode.UNAVAILABLE
    assert untrusted.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "client certificates required" in server.text()


async def test_every_interface_without_tls_and_auth_is_refused_naming_the_settings(
    tmp_path: Path, certificates: Certificates
) -> None:
    bare = refused_start(tmp_path, {"ROLLOUT_LISTEN": "0.0.0.0:0"})
    tls_only = refused_start(tmp_path, {"ROLLOUT_LISTEN": "[::]:0", **tls_env(certificates)})

    assert bare.returncode == 2
    assert "refusing to listen on 0.0.0.0:0" in bare.stderr
    for setting in (
        "ROLLOUT_TLS_CERT_FILE",
        "ROLLOUT_AUTH_TOKENS",
        "ROLLOUT_ALLOW_INSECURE_LISTEN",
    ):
        assert setting in bare.stderr
    assert tls_only.returncode == 2
    assert "without authentication" in tls_only.stderr
    assert "ROLLOUT_TLS_CERT_FILE" not in tls_only.stderr
    assert not (tmp_path / "state").exists()  # refused before opening anything


async def test_every_interface_is_served_when_allowed_or_protected(
    tmp_path: Path, certificates: Certificates
) -> None:
    allowed = ServerProcess(
        tmp_path / "allowed",
        env={"ROLLOUT_LISTEN": "0.0.0.0:0", "ROLLOUT_ALLOW_INSECURE_LISTEN": "1"},
    )
    protected = ServerProcess(
        tmp_path / "protected",
        env={
            "ROLLOUT_LISTEN": "0.0.0.0:0",
            "ROLLOUT_AUTH_TOKEN_FILE": str(write_token_file(tmp_path / "tokens")),
            **tls_env(certificates),
        },
    )
    allowed.start()
    protected.start()
    try:
        plain = await list_call(local_target(allowed), None)
        secure = await list_call(
            local_target(protected),
            grpc.ssl_channel_credentials(certificates.ca.read_bytes()),
            bearer(TENANT_A_TOKEN),
        )
    finally:
        assert allowed.stop() == 0, allowed.text()
        assert protected.stop() == 0, protected.text()

    assert isinstance(plain, pb.ListRolloutsResponse)
    assert isinstance(secure, pb.ListRolloutsResponse)
    assert "serving 0.0.0.0:0 without TLS" in allowed.text()


async def test_health_and_reflection_are_open_by_default_while_the_api_needs_a_token(
    tmp_path: Path,
) -> None:
    server = ServerProcess(
        tmp_path / "state", env={"ROLLOUT_AUTH_TOKEN_FILE": str(write_token_file(tmp_path / "t"))}
    )
    server.start()
    try:
        async with grpc.aio.insecure_channel(server.target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            checked = await health.Check(health_pb2.HealthCheckRequest(), timeout=20)
            reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
            listing = reflection_pb2.ServerReflectionRequest(list_services="")
            answers = [a async for a in reflection.ServerReflectionInfo(iter([listing]))]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await list_call(server.target, None)
    finally:
        assert server.stop() == 0, server.text()

    assert checked.status == health_pb2.HealthCheckResponse.SERVING
    names = {s.name for s in answers[0].list_services_response.service}
    assert "rollout.v1.RolloutService" in names
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ROLLOUT_TLS_CERT_FILE": "/nonexistent/cert.pem"}, "must be set together"),
        (
            {
                "ROLLOUT_TLS_CERT_FILE": "/nonexistent/c.pem",
                "ROLLOUT_TLS_KEY_FILE": "/nonexistent/k",
            },
            "tls_key_file '/nonexistent/k' cannot be read",
        ),
        ({"ROLLOUT_TLS_CLIENT_CA_FILE": "/nonexistent/ca.pem"}, "tls_client_ca_file needs"),
        ({"ROLLOUT_AUTH_TOKENS": '["tiny-secret"]'}, "auth_tokens[0]: a token is 16 to 4096"),
        ({"ROLLOUT_AUTH_TOKEN_FILE": "/nonexistent/tokens"}, "auth_token_file '/nonexistent"),
    ],
)
def test_unusable_security_settings_stop_the_server_naming_them(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    done = refused_start(tmp_path, env)

    assert done.returncode == 2
    assert message in done.stderr
    assert "tiny-secret" not in done.stderr
