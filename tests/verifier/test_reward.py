"""The reward rules' parsers: what counts as a reward, and what is a VERIFIER error."""

from __future__ import annotations

import pytest

from service.errors import VerifierError
from service.verifier.reward import parse_reward_json, parse_reward_txt


@pytest.mark.parametrize(("raw", "value"), [(b"1", 1.0), (b" 0.25\n", 0.25), (b"-3e-1", -0.3)])
def test_reward_txt_parses_one_float(raw: bytes, value: float) -> None:
    assert parse_reward_txt(raw) == pytest.approx(value)


@pytest.mark.parametrize("raw", [b"", b"lots", b"0.5 0.5", b"nan", b"inf", b"\xff"])
def test_reward_txt_that_is_not_one_finite_float_is_an_error(raw: bytes) -> None:
    with pytest.raises(VerifierError, match=r"reward\.txt"):
        parse_reward_txt(raw)


def test_reward_json_splits_reward_from_numeric_metrics() -> None:
    reward = parse_reward_json(b'{"reward": 0.5, "passed": 3, "flag": true, "note": "x"}')
    assert reward.value == 0.5
    assert reward.metrics == {"passed": 3.0}


@pytest.mark.parametrize("raw", [b"{", b"[1]", b'{"score": 1}', b'{"reward": "1"}'])
def test_reward_json_without_a_numeric_reward_is_an_error(raw: bytes) -> None:
    with pytest.raises(VerifierError, match=r"reward\.json"):
        parse_reward_json(raw)
