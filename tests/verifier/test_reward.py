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
    assert reward.metrics == {"reward": 0.5, "passed": 3.0}
    assert reward.key == "reward"


@pytest.mark.parametrize(
    "raw", [b"{", b"[1]", b"{}", b'{"note": "x"}', b'{"reward": "1", "score": 1}']
)
def test_reward_json_without_a_numeric_reward_is_an_error(raw: bytes) -> None:
    with pytest.raises(VerifierError, match=r"reward\.json"):
        parse_reward_json(raw)


def test_harbor_reward_json_with_one_key_gives_that_key_as_reward() -> None:
    reward = parse_reward_json(b'{"accuracy": 0.5, "note": "x"}')
    assert (reward.value, reward.metrics, reward.note) == (0.5, {"accuracy": 0.5}, "")
    assert reward.key == "accuracy"


def test_harbor_reward_json_names_its_reward_through_the_spec() -> None:
    reward = parse_reward_json(b'{"accuracy": 0.5, "f1": 0.25}', key="f1")
    assert (reward.value, reward.metrics, reward.key) == (0.25, {"accuracy": 0.5, "f1": 0.25}, "f1")


def test_harbor_reward_json_with_several_keys_and_none_named_leaves_the_reward_unset() -> None:
    reward = parse_reward_json(b'{"accuracy": 0.5, "f1": 0.25}')
    assert (reward.value, reward.key) == (None, "")
    assert reward.metrics == {"accuracy": 0.5, "f1": 0.25}
    assert "reward_key" in reward.note


@pytest.mark.parametrize("raw", [b'{"accuracy": 0.5}', b'{"f1": "high", "accuracy": 1}'])
def test_a_named_key_that_is_missing_or_not_a_number_is_an_error(raw: bytes) -> None:
    with pytest.raises(VerifierError, match="f1"):
        parse_reward_json(raw, key="f1")
