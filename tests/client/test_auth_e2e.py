"""The clients and the command line against a real server that wants a bearer token and a
client certificate (mTLS with a private CA made for the test)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from rollout.v1 import rollout_pb2 as pb
from rollout_client import (
    AsyncRolloutClient,
    RolloutClient,
    UnauthenticatedError,
    UnavailableError,
    tls_credentials,
)
from rollout_client.cli import EXIT_ERROR, app
from typer.testing import CliRunner, Result

from testing.server_process import ServerProcess
from tests.e2e.auth_support import (
    TENANT_A_TOKEN,
    TENANT_B_TOKEN,
    Certificates,
    make_certificates,
    write_token_file,
)

pytestmark = pytest.mark.e2e

SPEC = {
    "task": {"instruction": "copy", "setup": ["echo hi > a.txt"], "verify": ["test -f b.txt"]},
    "agent": {"name": "command", "command": "cp a.txt b.txt"},
}
runner = CliRunner()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory, certs: Certificates) -> Iterator[str]:
    """A server that wants tenant a's (or the admin's) token and a client certificate."""
    folder = tmp_path_factory.mktemp("mtls-server")
    server = ServerProcess(
        folder / "state",
        env={
            "ROLLOUT_AUTH_TOKEN_FILE": str(write_token_file(folder / "tokens")),
            "ROLLOUT_TLS_CERT_FILE": str(certs.server_cert),
            "ROLLOUT_TLS_KEY_FILE": str(certs.server_key),
            "ROLLOUT_TLS_CLIENT_CA_FILE": str(certs.ca),
        },
    )
    yield server.start()
    assert server.stop() == 0, server.text()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(f"{TENANT_A_TOKEN}\n")
    return path


def mtls(certs: Certificates) -> dict[str, Path]:
    return {"ca_file": certs.ca, "cert_file": certs.client_cert, "key_file": certs.client_key}


def test_sync_client_with_token_and_client_certificate(target: str, certs: Certificates) -> None:
    with RolloutClient(
        target, token=TENANT_A_TOKEN, credentials=tls_credentials(**mtls(certs))
    ) as c:
        rollout = c.run(SPEC)
        listed = c.list(page_size=100)

    assert rollout.status == pb.ROLLOUT_STATUS_SUCCEEDED, rollout.result.error
    assert rollout.tenant == "tenant-a"
    assert rollout.id in [r.id for r in listed.rollouts]


def test_the_token_comes_from_rollout_token(
    target: str, certs: Certificates, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials = tls_credentials(**mtls(certs))
    monkeypatch.setenv("ROLLOUT_TOKEN", TENANT_A_TOKEN)
    with RolloutClient(target, credentials=credentials) as client:
        listed = client.list()
    monkeypatch.delenv("ROLLOUT_TOKEN")
    with (
        RolloutClient(target, credentials=credentials) as client,
        pytest.raises(UnauthenticatedError, match="missing bearer token"),
    ):
        client.list()
    with (
        RolloutClient(target, credentials=credentials, token=TENANT_B_TOKEN) as client,
        pytest.raises(UnauthenticatedError, match="invalid bearer token"),
    ):
        client.list()

    assert isinstance(listed, pb.ListRolloutsResponse)


async def test_async_client_with_token_and_client_certificate(
    target: str, certs: Certificates
) -> None:
    credentials = tls_credentials(**mtls(certs))
    async with AsyncRolloutClient(target, token=TENANT_A_TOKEN, credentials=credentials) as client:
        started = await client.start(SPEC)
        events = [event async for event in client.watch(started.id)]
        got = await client.get(started.id)

    assert events[-1].finished.status == pb.ROLLOUT_STATUS_SUCCEEDED
    assert got.tenant == "tenant-a"


async def test_a_client_without_a_certificate_cannot_connect(
    target: str, certs: Certificates
) -> None:
    credentials = tls_credentials(ca_file=certs.ca)
    async with AsyncRolloutClient(target, token=TENANT_A_TOKEN, credentials=credentials) as client:
        with pytest.raises(UnavailableError):
            await client.list()


def test_bad_client_settings_are_refused_before_any_call(certs: Certificates) -> None:
    with pytest.raises(ValueError, match="cert_file and key_file") as half:
        tls_credentials(cert_file=certs.client_cert)
    with pytest.raises(ValueError, match=r"^token: ") as spaced:
        RolloutClient("127.0.0.1:1", token="secret with spaces")

    assert "secret" not in str(spaced.value)
    assert half.value is not None


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    # Wide enough that usage errors stay on one line.
    return runner.invoke(
        app, list(args), env={"ROLLOUT_TOKEN": "", "COLUMNS": "300", **(env or {})}
    )


def test_cli_global_options_carry_token_and_certificates(
    target: str, certs: Certificates, token_file: Path
) -> None:
    tls = ["--tls-ca", str(certs.ca), "--tls-cert", str(certs.client_cert)]
    tls += ["--tls-key", str(certs.client_key)]

    listed = cli("--token-file", str(token_file), *tls, "list", "--json", "--target", target)
    refused = cli(*tls, "list", "--target", target)

    assert listed.exit_code == 0, listed.output
    assert isinstance(json.loads(listed.stdout), dict)
    assert refused.exit_code == EXIT_ERROR
    assert refused.stderr.startswith("error: not authenticated (missing bearer token")


def test_cli_connection_options_come_from_the_environment(target: str, certs: Certificates) -> None:
    env = {
        "ROLLOUT_TOKEN": TENANT_A_TOKEN,
        "ROLLOUT_TLS_CA": str(certs.ca),
        "ROLLOUT_TLS_CERT": str(certs.client_cert),
        "ROLLOUT_TLS_KEY": str(certs.client_key),
        "ROLLOUT_TARGET": target,
    }

    done = cli("run", "--instruction", "x", "--agent-command", "true", "--json", env=env)

    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["tenant"] == "tenant-a"


def test_cli_token_and_token_file_together_is_bad_usage(token_file: Path) -> None:
    result = cli("--token", TENANT_A_TOKEN, "--token-file", str(token_file), "get", "x")

    assert result.exit_code == 2
    assert "Invalid value for --token: give --token or --token-file, not both" in result.stderr
    assert TENANT_A_TOKEN not in result.output


def test_tls_credentials_take_str_paths_and_pem_bytes(target: str, certs: Certificates) -> None:
    # str paths crashed: 'str' object has no attribute 'read_bytes'.
    by_str = tls_credentials(
        ca_file=str(certs.ca), cert_file=str(certs.client_cert), key_file=str(certs.client_key)
    )
    by_bytes = tls_credentials(
        ca_file=certs.ca.read_bytes(),
        cert_file=certs.client_cert.read_bytes(),
        key_file=certs.client_key.read_bytes(),
    )
    for credentials in (by_str, by_bytes):
        with RolloutClient(target, token=TENANT_A_TOKEN, credentials=credentials) as client:
            assert isinstance(client.list(page_size=1), pb.ListRolloutsResponse)
    with pytest.raises(ValueError, match=r"ca_file '/no/such\.pem' cannot be read"):
        tls_credentials(ca_file="/no/such.pem")


def test_cli_connection_options_after_the_command_win(
    target: str, certs: Certificates, token_file: Path, closed_target: str
) -> None:
    tls = ["--tls-ca", str(certs.ca), "--tls-cert", str(certs.client_cert)]
    tls += ["--tls-key", str(certs.client_key)]
    # Before the command: a wrong server and a token of the wrong kind; after it: the right ones.
    before = ["--target", closed_target, "--token", TENANT_B_TOKEN]

    listed = cli(
        *before, "list", "--json", "--target", target, "--token-file", str(token_file), *tls
    )
    mixed = cli("--token-file", str(token_file), *tls[:2], "list", *tls[2:], "--target", target)

    assert listed.exit_code == 0, listed.output
    assert isinstance(json.loads(listed.stdout), dict)
    assert mixed.exit_code == 0, mixed.output
