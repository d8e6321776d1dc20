"""The web dashboard: the browser speaks rollout.v1.RolloutService over Connect.

    browser (web/, bundled into static/)
      | HTTPS when the API has tls_cert_file (client certificates too with tls_client_ca_file)
      | Connect protocol, `authorization: Bearer <token>` from the page
    ROLLOUT_DASHBOARD_LISTEN: hypercorn serving `site.DashboardSite`
      | `inbound`: the Host, the token (when tokens are set) and the size judged first; the
      | request decoded off the event loop (`decode`), then run by connectrpc
      | the five read-only methods (forward.READ_METHODS), token passed on as gRPC metadata
    the server's own gRPC server, on a private unix socket (a 0700 temp directory)
      | the same interceptors as every API call: bearer auth, tenant, tracing
    RolloutServicer

Why forward instead of calling the servicer: a call from the page then is a gRPC call like any
other, so authentication, tenants, validation, status codes and metrics are the API's own,
never a second copy to keep in step (the token checked before a body is read is the API's own
`authenticate`). The unix socket (rather than the API's TCP port) is
reachable without the API's TLS certificate, whose names need not include a loopback address,
and without a client certificate the dashboard does not have; TLS and client certificates are
enforced at the dashboard's own listener instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.door import door

if TYPE_CHECKING:
    from service.dashboard.serve import Dashboard

__all__ = ["Dashboard"]

__getattr__ = door(__name__)
