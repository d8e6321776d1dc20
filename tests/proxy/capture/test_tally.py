"""A wrong endpoint is known at the first trainable call (`CallTally.refused`); any other
failure, or a refusal after a call went through, is left to the counts."""

from __future__ import annotations

from service.models import Turn
from service.proxy.capture.tally import CallTally


def _turn(status: int, *, trainable: bool = True, error: str = "") -> Turn:
    return Turn(index=0, trainable=trainable, upstream_status=status, upstream_error=error)


def test_a_refused_first_call_says_why() -> None:
    for status in (401, 403, 404):
        tally = CallTally()
        tally.add(_turn(status, error=f"upstream HTTP {status}: no"), upstream_failed=True)
        assert tally.refused.is_set()
        assert tally.refusal == f"upstream HTTP {status}: no"


def test_an_unreachable_upstream_is_refused() -> None:
    tally = CallTally()
    tally.add(_turn(0, error="cannot connect to 127.0.0.1:9: refused"), upstream_failed=True)
    assert not tally.refused.is_set()  # status 0 alone may be a timeout
    tally.add(_turn(0, error="cannot connect"), upstream_failed=True, unreachable=True)
    assert tally.refused.is_set()
    assert tally.refusal == "cannot connect"


def test_what_is_not_a_wrong_endpoint_is_not_refused() -> None:
    tally = CallTally()
    tally.add(_turn(401, trainable=False), upstream_failed=True)  # a title call
    tally.add(_turn(503), upstream_failed=True)  # a bad moment, not a wrong endpoint
    tally.add(_turn(404), upstream_failed=False)  # the agent hung up
    assert not tally.refused.is_set()
    worked = CallTally()
    worked.add(_turn(200), upstream_failed=False)
    worked.add(_turn(401), upstream_failed=True)  # after a call went through
    assert not worked.refused.is_set()
