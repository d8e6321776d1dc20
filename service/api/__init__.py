"""The gRPC edge: the servicer (`servicer`, `handlers`), proto <-> domain translation
(`convert`, `inbound`), status codes (`errors`), bearer tokens (`auth`), the exposure rules of
every listener (`transport`) and the health and metrics ports; what the server and the
dashboard use of it is exported here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.door import door

if TYPE_CHECKING:
    from service.api.auth import (
        BearerAuthInterceptor,
        TokenTable,
        Unauthenticated,
        authenticate,
        load_tokens,
    )
    from service.api.handlers import add_servicer
    from service.api.health_port import check_health_listen, open_health_server
    from service.api.metrics_port import MetricsEndpoint
    from service.api.servicer import RolloutServicer
    from service.api.transport import (
        check_dashboard_exposure,
        check_exposure,
        check_metrics_exposure,
        check_proxy_exposure,
        server_credentials,
    )

__all__ = [
    "BearerAuthInterceptor",
    "MetricsEndpoint",
    "RolloutServicer",
    "TokenTable",
    "Unauthenticated",
    "add_servicer",
    "authenticate",
    "check_dashboard_exposure",
    "check_exposure",
    "check_health_listen",
    "check_metrics_exposure",
    "check_proxy_exposure",
    "load_tokens",
    "open_health_server",
    "server_credentials",
]

__getattr__ = door(__name__)
