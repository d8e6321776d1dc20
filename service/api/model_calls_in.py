"""Model-call requests in: a `ModelCallSelector` and a policy version, checked at the edge.

Who may act: these calls reach many rollouts at once, so each is scoped to its caller's
tenant (`auth.caller_tenant`): a tenant pauses, resumes and versions its own rollouts only,
and an admin token (or a server without auth) reaches every rollout. The selector keeps the
tenant, so two tenants' pauses with the same endpoint are two pauses.
"""

from __future__ import annotations

from rollout.v1 import rollout_pb2 as pb

from service.engine import CallSelector, label_violations
from service.errors import FieldViolation, SpecError

__all__ = ["selector_from_proto", "version_from_proto"]

_MAX_VERSION = 2**63 - 1
"""Versions fit a signed 64-bit integer (as every store and exporter reads them)."""
_MAX_MODEL_CHARS = 256


def selector_from_proto(message: pb.ModelCallSelector, tenant: str | None) -> CallSelector:
    """The selector, for the caller's tenant; INVALID_ARGUMENT naming the field if unusable."""
    target = message.WhichOneof("target")
    if target == "endpoint":
        endpoint = message.endpoint
        if len(endpoint.model) > _MAX_MODEL_CHARS:
            problem = f"exceeds {_MAX_MODEL_CHARS} characters"
            raise SpecError([FieldViolation("selector.endpoint.model", problem)])
        return CallSelector.endpoint(tenant, endpoint.base_url, endpoint.model)
    if target == "labels":
        labels = dict(message.labels.labels)
        violations = label_violations("selector.labels.labels", labels)
        if violations:
            raise SpecError(violations)
        return CallSelector.by_labels(tenant, labels)
    raise SpecError([FieldViolation("selector", "set one of endpoint or labels")])


def version_from_proto(version: int) -> int:
    if not 1 <= version <= _MAX_VERSION:
        raise SpecError([FieldViolation("version", f"must be 1..{_MAX_VERSION}")])
    return version
