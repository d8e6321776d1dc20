"""GRPC_VERBOSITY=ERROR, unless it is set: imported by the package before anything imports grpc.

gRPC core reads its log level once, when grpc is first imported; below ERROR (its default now
that it logs through absl) it writes a failed TLS handshake to stderr itself ("I... Handshake
failed with error SSL_ERROR_SSL"), beside the typed error the client raises and above the
`rollout` command's one-line error. Whoever sets GRPC_VERBOSITY (or GRPC_TRACE) keeps theirs.
"""

import os

__all__: list[str] = []

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
