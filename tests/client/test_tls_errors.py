"""A TLS or mTLS mismatch says what failed in the handshake, not "is the server running?":
the command line against real servers (plaintext, TLS, mTLS; a private CA made for the test)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from rollout_client.cli import EXIT_ERROR, app
from rollout_client.unreachable import why_unreachable
from typer.testing import CliRunner

from testing.server_process import ServerProcess
from tests.client.conftest import cli_argv
from tests.e2e.auth_support import Certificates, make_certificates

pytestmark = pytest.mark.e2e

runner = CliRunner()
NOT_TRUSTED = "TLS handshake with {target} failed: the server's certificate is not signed by a CA"
NOT_TLS = "TLS handshake with {target} failed: the server does not speak TLS"
CLOSED = "the server at {target} closed the connection during the handshake"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("pki"))


def serve(folder: Path, env: dict[str, str]) -> Iterator[str]:
    server = ServerProcess(folder / "state", env=env)
    yield server.start()
    assert server.stop() == 0, server.text()


@pytest.fixture(scope="module")
def tls_target(tmp_path_factory: pytest.TempPathFactory, certs: Certificates) -> Iterator[str]:
    env = {"ROLLOUT_TLS_CERT_FILE": str(certs.server_cert)}
    env["ROLLOUT_TLS_KEY_FILE"] = str(certs.server_key)
    yield from serve(tmp_path_factory.mktemp("tls"), env)


@pytest.fixture(scope="module")
def mtls_target(tmp_path_factory: pytest.TempPathFactory, certs: Certificates) -> Iterator[str]:
    env = {
        "ROLLOUT_TLS_CERT_FILE": str(certs.server_cert),
        "ROLLOUT_TLS_KEY_FILE": str(certs.server_key),
        "ROLLOUT_TLS_CLIENT_CA_FILE": str(certs.ca),
    }
    yield from serve(tmp_path_factory.mktemp("mtls"), env)


def error_line(target: str, *flags: str | Path) -> str:
    """`rollout list` against `target`: it must fail, with one line on stderr."""
    result = runner.invoke(app, ["list", "--target", target, *map(str, flags)])
    assert result.exit_code == EXIT_ERROR, result.output
    [line] = result.stderr.splitlines()
    assert "is the server running" not in line
    return line


def test_a_server_certificate_from_another_ca(tls_target: str, certs: Certificates) -> None:
    line = error_line(tls_target, "--tls-ca", certs.other_ca)

    assert NOT_TRUSTED.format(target=tls_target) in line
    assert "--tls-ca" in line


def test_a_private_ca_against_the_systems_roots(tls_target: str) -> None:
    assert NOT_TRUSTED.format(target=tls_target) in error_line(tls_target, "--tls")


def test_a_tls_client_to_a_plaintext_server(server_target: str, certs: Certificates) -> None:
    line = error_line(server_target, "--tls-ca", certs.ca)

    assert NOT_TLS.format(target=server_target) in line
    assert "ROLLOUT_TLS_CERT_FILE" in line


def test_a_plaintext_client_to_a_tls_server(tls_target: str) -> None:
    line = error_line(tls_target)

    assert CLOSED.format(target=tls_target) in line
    assert "it speaks TLS and this client did not (pass --tls-ca" in line
    assert "client certificate" not in line


def test_no_client_certificate_for_a_server_that_requires_one(
    mtls_target: str, certs: Certificates
) -> None:
    line = error_line(mtls_target, "--tls-ca", certs.ca)

    assert CLOSED.format(target=mtls_target) in line
    assert "requires a client certificate, which this client did not send (--tls-cert" in line
    assert "did not (pass --tls-ca" not in line


def test_a_client_certificate_the_server_does_not_trust(
    mtls_target: str, certs: Certificates
) -> None:
    flags = ("--tls-ca", certs.ca, "--tls-cert", certs.stranger_cert)
    line = error_line(mtls_target, *flags, "--tls-key", certs.stranger_key)

    assert CLOSED.format(target=mtls_target) in line
    assert "signed by a CA it trusts, and this client's (--tls-cert) is not" in line
    assert "did not send" not in line


def test_the_right_client_certificate_is_served(mtls_target: str, certs: Certificates) -> None:
    flags = ("--tls-ca", certs.ca, "--tls-cert", certs.client_cert, "--tls-key", certs.client_key)
    result = runner.invoke(app, ["list", "--target", mtls_target, *map(str, flags)])

    assert result.exit_code == 0, result.output


def test_an_unavailable_server_that_was_reached_keeps_grpcs_words() -> None:
    line = why_unreachable("the server is shutting down", "127.0.0.1:7")

    assert (
        line
        == "server unavailable (the server is shutting down): is the server running at 127.0.0.1:7?"
    )


@pytest.mark.parametrize("wrong", ["another CA", "plaintext to TLS"])
def test_the_command_prints_one_line_and_no_grpc_log(
    wrong: str, tls_target: str, certs: Certificates
) -> None:
    # gRPC core logs a failed handshake to fd 2 itself, above the command's own line.
    flags = ["--tls-ca", str(certs.other_ca)] if wrong == "another CA" else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
    done = subprocess.run(
        cli_argv("list", "--target", tls_target, *flags),
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == EXIT_ERROR
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("error: "), done.stderr
