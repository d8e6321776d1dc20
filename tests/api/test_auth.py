"""The token format and the loopback rule (the interceptor itself runs in tests/e2e)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from service.api.auth import load_tokens
from service.api.transport import is_loopback
from service.config import Settings
from service.errors import ConfigError

SECRET = "s3cret-token-value-0123"


def settings(tokens: list[str], token_file: Path | None = None) -> Settings:
    return Settings(auth_tokens=[SecretStr(t) for t in tokens], auth_token_file=token_file)


def test_tokens_from_settings_and_file_map_to_their_tenants(tmp_path: Path) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text(f"# comment\n\n   \nfile-token-0123456789 team-2\n{SECRET}\n")

    table = load_tokens(settings(["setting-token-0123456 team.1"], token_file))

    assert table.lookup("setting-token-0123456") == (True, "team.1")
    assert table.lookup("file-token-0123456789") == (True, "team-2")
    assert table.lookup(SECRET) == (True, None)
    assert table.lookup(SECRET[:-1]) == (False, None)
    assert table.lookup("") == (False, None)
    assert table.describe() == "3 bearer tokens (2 tenants, 1 admin)"


def test_one_of_each_is_counted_in_the_singular() -> None:
    table = load_tokens(settings(["setting-token-0123456 team.1"]))

    assert table.describe() == "1 bearer token (1 tenant, 0 admin)"


def test_no_tokens_is_an_empty_table() -> None:
    assert not load_tokens(settings([]))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("short team", "a token is 16 to 4096 visible ASCII characters"),
        (f"{SECRET} team extra", 'expected "<token>" or "<token> <tenant>"'),
        (f"{SECRET} -team", "a tenant is 1 to 64 of"),
        (f"{SECRET} {'t' * 65}", "a tenant is 1 to 64 of"),
        (f"{SECRET}\u00e9", "visible ASCII"),
    ],
)
def test_a_bad_line_names_its_place_and_never_the_token(
    tmp_path: Path, line: str, message: str
) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text(f"# first line\n{line}\n")

    with pytest.raises(ConfigError, match=message) as raised:
        load_tokens(settings([], token_file))

    assert f"auth_token_file '{token_file}' line 2: " in str(raised.value)
    assert SECRET not in str(raised.value)
    assert "short" not in str(raised.value)


def test_a_token_given_twice_is_refused(tmp_path: Path) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text(f"{SECRET} other-team\n")

    with pytest.raises(ConfigError, match="line 1: this token is already configured"):
        load_tokens(settings([f"{SECRET} team"], token_file))


@pytest.mark.parametrize(
    ("listen", "loopback"),
    [
        ("127.0.0.1:50051", True),
        ("127.8.9.10:0", True),
        ("[::1]:50051", True),
        ("localhost:50051", True),
        ("unix:/run/rollout.sock", True),
        ("0.0.0.0:50051", False),
        ("[::]:50051", False),
        (":50051", False),
        ("192.168.1.5:50051", False),
        ("rollouts.example.com:443", False),
    ],
)
def test_loopback_addresses(listen: str, loopback: bool) -> None:
    assert is_loopback(listen) is loopback
