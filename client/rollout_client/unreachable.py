"""Why the `rollout` command could not reach its server, told from gRPC's UNAVAILABLE details.

gRPC reports a refused connection and a failed TLS handshake alike ("failed to connect to all
addresses; last error: ..."); only the tail tells them apart:

    tail of the details                    what failed
    Connection refused                     nothing listens at the target
    CERTIFICATE_VERIFY_FAILED              the server's certificate is not signed by a CA this
                                           client trusts (--tls-ca; --tls trusts public CAs)
    WRONG_VERSION_NUMBER                   a TLS client and a server that does not speak TLS
    Socket closed                          the server ended the handshake; the client sees the
                                           same closed socket in each case, so what it sent
                                           tells them apart: no TLS (the server speaks TLS),
                                           TLS without a client certificate (the server wants
                                           one), or with one (the server does not trust it)
    anything else                          gRPC's own words, and the question of old

An UNAVAILABLE that is not a connection failure (a server shutting down) keeps gRPC's words.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Sent", "why_unreachable"]

_CONNECT_FAILED = "failed to connect to all addresses"
_CAUSES = (
    (
        "Connection refused",
        "nothing is listening there (connection refused): is the server running at {target}?",
    ),
    (
        "CERTIFICATE_VERIFY_FAILED",
        "TLS handshake with {target} failed: the server's certificate is not signed by a CA "
        "this client trusts (pass the CA that signed it with --tls-ca)",
    ),
    (
        "WRONG_VERSION_NUMBER",
        "TLS handshake with {target} failed: the server does not speak TLS (drop --tls and "
        "--tls-*, or give the server ROLLOUT_TLS_CERT_FILE and ROLLOUT_TLS_KEY_FILE)",
    ),
)
_CLOSED = "Socket closed"
_CLOSED_BECAUSE = {
    "plaintext": "it speaks TLS and this client did not (pass --tls-ca, or --tls if a public CA "
    "signed its certificate)",
    "tls": "it requires a client certificate, which this client did not send (--tls-cert and "
    "--tls-key)",
    "mtls": "it requires a client certificate signed by a CA it trusts, and this client's "
    "(--tls-cert) is not",
}


class Sent(StrEnum):
    """What the client offered in the handshake: no TLS, TLS, or TLS with a certificate."""

    PLAINTEXT = "plaintext"
    TLS = "tls"
    MTLS = "mtls"


def why_unreachable(details: str, target: str, sent: Sent = Sent.PLAINTEXT) -> str:
    """One line saying what failed when the server at `target` answered UNAVAILABLE, to a
    client that offered `sent` (a `Sent` value)."""
    if _CONNECT_FAILED in details:
        for marker, cause in _CAUSES:
            if marker in details:
                return cause.format(target=target)
        if _CLOSED in details:
            return (
                f"the server at {target} closed the connection during the handshake: "
                + _CLOSED_BECAUSE[sent]
            )
    return f"server unavailable ({details}): is the server running at {target}?"
