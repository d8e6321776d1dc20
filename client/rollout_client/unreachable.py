"""Why the `rollout` command could not reach its server, told from gRPC's UNAVAILABLE details.

gRPC reports a refused connection and a failed TLS handshake alike ("failed to connect to all
addresses; last error: ..."); only the tail tells them apart:

    tail of the details                    what failed
    Connection refused                     nothing listens at the target
    CERTIFICATE_VERIFY_FAILED              the server's certificate is not signed by a CA this
                                           client trusts (--tls-ca; --tls trusts public CAs)
    WRONG_VERSION_NUMBER                   a TLS client and a server that does not speak TLS
    Socket closed                          the server ended the handshake: it speaks TLS to a
                                           plaintext client, or wants a client certificate it
                                           was not given or does not trust (the client sees
                                           the same closed socket in each case)
    anything else                          gRPC's own words, and the question of old

An UNAVAILABLE that is not a connection failure (a server shutting down) keeps gRPC's words.
"""

from __future__ import annotations

__all__ = ["why_unreachable"]

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
    (
        "Socket closed",
        "the server at {target} closed the connection during the handshake: it speaks TLS and "
        "this client did not (pass --tls-ca, or --tls if a public CA signed its certificate), "
        "or it requires a client certificate this client did not send (--tls-cert and "
        "--tls-key) or that a CA it trusts did not sign",
    ),
)


def why_unreachable(details: str, target: str) -> str:
    """One line saying what failed when the server at `target` answered UNAVAILABLE."""
    if _CONNECT_FAILED in details:
        for marker, cause in _CAUSES:
            if marker in details:
                return cause.format(target=target)
    return f"server unavailable ({details}): is the server running at {target}?"
