"""Reading the google.rpc.BadRequest of a failed call, as the validation tests check it."""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

__all__ = ["violated_fields"]


def violated_fields(error: grpc.RpcError) -> list[str]:
    """The fields named by the call's BadRequest details, in order (none: an empty list)."""
    status = rpc_status.from_call(error)
    assert status is not None, f"no rich status details: {error}"
    fields = []
    for detail in status.details:
        bad_request = error_details_pb2.BadRequest()
        if detail.Unpack(bad_request):
            fields += [v.field for v in bad_request.field_violations]
    return fields
