"""Tokens, a token file and a private CA with server and client certificates, for the tests
of authentication and TLS (made with the `openssl` command line, valid for one day)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ADMIN_TOKEN",
    "TENANT_A_TOKEN",
    "TENANT_B_TOKEN",
    "Certificates",
    "bearer",
    "make_certificates",
    "write_token_file",
]

TENANT_A_TOKEN = "tok-a-4f0c2e9d81b7a6c3"
TENANT_B_TOKEN = "tok-b-93d1e07ab2c4f815"
ADMIN_TOKEN = "tok-admin-5e6f7a8b9c0d1e2f"


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying `token`."""
    return (("authorization", f"Bearer {token}"),)


def write_token_file(path: Path) -> Path:
    """Tenant a's and the admin's tokens in the documented file format (b's goes in settings)."""
    path.write_text(
        f"# rollout-service tokens\n\n{TENANT_A_TOKEN} tenant-a\n  {ADMIN_TOKEN}  \n",
        encoding="utf-8",
    )
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class Certificates:
    """A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    """Another CA: trusting only it must fail."""
    stranger_cert: Path
    """A client certificate the other CA signed."""
    stranger_key: Path


def make_certificates(folder: Path) -> Certificates:
    folder.mkdir(parents=True, exist_ok=True)
    _self_signed_ca(folder, "ca")
    _self_signed_ca(folder, "other-ca")
    _signed(folder, "server", "subjectAltName=IP:127.0.0.1,DNS:localhost")
    _signed(folder, "client", "extendedKeyUsage=clientAuth")
    _signed(folder, "stranger", "extendedKeyUsage=clientAuth", ca="other-ca")
    return Certificates(
        ca=folder / "ca.pem",
        server_cert=folder / "server.pem",
        server_key=folder / "server.key",
        client_cert=folder / "client.pem",
        client_key=folder / "client.key",
        other_ca=folder / "other-ca.pem",
        stranger_cert=folder / "stranger.pem",
        stranger_key=folder / "stranger.key",
    )


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _self_signed_ca(folder: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        "-subj", f"/CN=rollout test {name}",
        "-keyout", str(folder / f"{name}.key"), "-out", str(folder / f"{name}.pem"),
    )  # fmt: skip


def _signed(folder: Path, name: str, extension: str, *, ca: str = "ca") -> None:
    key, request = folder / f"{name}.key", folder / f"{name}.csr"
    extensions = folder / f"{name}.ext"
    extensions.write_text(extension + "\n")
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=rollout test {name}",
        "-keyout", str(key), "-out", str(request),
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(request), "-days", "1",
        "-CA", str(folder / f"{ca}.pem"), "-CAkey", str(folder / f"{ca}.key"), "-CAcreateserial",
        "-extfile", str(extensions), "-out", str(folder / f"{name}.pem"),
    )  # fmt: skip
