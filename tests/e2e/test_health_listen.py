"""ROLLOUT_HEALTH_LISTEN: a plaintext port beside a TLS API that serves the standard health
service and nothing else, with the API's own states (SERVING, then NOT_SERVING from SIGTERM
on); a port it would share with the API, or that another process holds, stops the server."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from rollout.v1 import rollout_pb2 as pb
from rollout.v1 import rollout_pb2_grpc

from testing.server_process import ServerProcess
from tests.e2e.auth_support import make_certificates
from tests.e2e.test_startup import refused

pytestmark = pytest.mark.e2e

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[ServerProcess, str, str]]:
    """A server whose API speaks only TLS, its health port on loopback: (server, API, health)."""
    certs = make_certificates(tmp_path / "pki")
    health = f"127.0.0.1:{_free_port()}"
    env = {
        "ROLLOUT_TLS_CERT_FILE": str(certs.server_cert),
        "ROLLOUT_TLS_KEY_FILE": str(certs.server_key),
        "ROLLOUT_HEALTH_LISTEN": health,
    }
    server = ServerProcess(tmp_path / "state", env=env)
    target = server.start()
    yield server, target, health
    server.stop()


def test_the_health_port_answers_in_plaintext_beside_a_tls_api(
    tls_server: tuple[ServerProcess, str, str],
) -> None:
    server, target, health = tls_server
    assert f"rollout-service health (plaintext) at {health}" in server.text()
    with grpc.insecure_channel(health) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert answer.status == SERVING
    # The API itself speaks only TLS.
    with grpc.insecure_channel(target) as channel, pytest.raises(grpc.RpcError) as plaintext:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE


def test_the_health_port_serves_neither_the_api_nor_reflection(
    tls_server: tuple[ServerProcess, str, str],
) -> None:
    _, _, health = tls_server
    with grpc.insecure_channel(health) as channel:
        with pytest.raises(grpc.RpcError) as api:
            rollout_pb2_grpc.RolloutServiceStub(channel).ListRollouts(pb.ListRolloutsRequest())
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        with pytest.raises(grpc.RpcError) as listing:
            next(iter(reflection.ServerReflectionInfo(iter([request]))))
    assert api.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert listing.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_sigterm_turns_the_health_port_not_serving_then_closes_it(
    tls_server: tuple[ServerProcess, str, str],
) -> None:
    server, _, health = tls_server
    with grpc.insecure_channel(health) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
        assert next(watch).status == SERVING
        assert server.stop() == 0, server.text()
        # Flipped as the drain begins, while the port still serves; the port closes after.
        assert next(watch).status == NOT_SERVING
        with pytest.raises(grpc.RpcError) as ended:
            next(watch)
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE, ended.value
    with grpc.insecure_channel(health) as channel, pytest.raises(grpc.RpcError) as closed:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert closed.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_health_port_equal_to_the_api_port_is_refused(tmp_path: Path) -> None:
    port = _free_port()
    env = {"ROLLOUT_LISTEN": f"127.0.0.1:{port}", "ROLLOUT_HEALTH_LISTEN": f"0.0.0.0:{port}"}
    line = refused(tmp_path, env)

    assert f"0.0.0.0:{port} (ROLLOUT_HEALTH_LISTEN) is the port of ROLLOUT_LISTEN" in line


def test_a_health_port_in_use_is_refused_naming_the_setting(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        line = refused(tmp_path, {"ROLLOUT_HEALTH_LISTEN": f"127.0.0.1:{port}"})

    assert f"127.0.0.1:{port} (ROLLOUT_HEALTH_LISTEN) is already in use" in line


def test_a_health_port_with_token_only_health_is_refused(tmp_path: Path) -> None:
    env = {"ROLLOUT_HEALTH_LISTEN": "127.0.0.1:0", "ROLLOUT_AUTH_HEALTH_OPEN": "false"}
    line = refused(tmp_path, env)

    assert "ROLLOUT_HEALTH_LISTEN serves health checks without a token" in line
    assert "ROLLOUT_AUTH_HEALTH_OPEN=false" in line
