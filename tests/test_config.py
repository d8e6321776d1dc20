"""Reading the settings: lists as PATH or JSON, and bad values as one ConfigError line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.config import load_settings
from service.errors import ConfigError


@pytest.mark.parametrize(
    ("value", "roots"),
    [
        ("/srv/a:/srv/b", [Path("/srv/a"), Path("/srv/b")]),
        ("/srv/a", [Path("/srv/a")]),
        ("/srv/a::/srv/b:", [Path("/srv/a"), Path("/srv/b")]),
        ('["/srv/a", "/srv/b"]', [Path("/srv/a"), Path("/srv/b")]),
        ('["/srv/a:b"]', [Path("/srv/a:b")]),
        ("", []),
    ],
)
def test_task_roots_are_a_path_list_or_a_json_list(
    monkeypatch: pytest.MonkeyPatch, value: str, roots: list[Path]
) -> None:
    monkeypatch.setenv("ROLLOUT_TASK_ROOTS", value)

    assert load_settings([]).task_roots == roots


def test_task_roots_flags_stay_a_list() -> None:
    settings = load_settings(["--task-roots", "/srv/a", "--task-roots", "/srv/b"])

    assert settings.task_roots == [Path("/srv/a"), Path("/srv/b")]


def test_a_broken_json_list_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUT_TASK_ROOTS", '["/srv/a"')

    with pytest.raises(ConfigError, match=r"^ROLLOUT_TASK_ROOTS is '\[\"/srv/a\"': not a valid"):
        load_settings([])


def test_every_bad_value_is_named_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUT_MAX_QUEUED", "many")

    with pytest.raises(ConfigError) as raised:
        load_settings(["--log-level", "LOUD"])

    [line] = str(raised.value).splitlines()
    assert "ROLLOUT_MAX_QUEUED is 'many': expected a valid integer" in line
    assert "--log-level is 'LOUD': expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL" in line


def test_max_running_is_at_least_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUT_MAX_RUNNING", "0")

    with pytest.raises(ConfigError, match=r"^ROLLOUT_MAX_RUNNING is '0': .*greater than or equal"):
        load_settings([])


def test_a_long_value_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUT_MAX_RUNNING", "9" * 500 + "x")

    with pytest.raises(ConfigError, match=r"\(501 chars\)"):
        load_settings([])


def test_a_state_dir_overlays_cannot_mount_from_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUT_STATE_DIR", "/srv/rollout:state")

    with pytest.raises(
        ConfigError, match=r"^ROLLOUT_STATE_DIR is '/srv/rollout:state': local sandboxes mount"
    ):
        load_settings([])


HOSTS_SETTINGS = ("ROLLOUT_METRICS_HOSTS", "ROLLOUT_DASHBOARD_HOSTS")


@pytest.mark.parametrize("setting", HOSTS_SETTINGS)
def test_host_names_are_names_or_addresses(monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    names = ["rollout.example.internal", "Dash.Example.", "10.0.0.5", "::1"]
    monkeypatch.setenv(setting, json.dumps(names))

    settings = load_settings([])

    assert settings.model_dump()[setting.removeprefix("ROLLOUT_").lower()] == names


@pytest.mark.parametrize("setting", HOSTS_SETTINGS)
@pytest.mark.parametrize(
    "name", ["a.example:9464", "[::1]", "http://a.example", "", "a b", "-a", "ab:80"]
)
def test_a_host_that_is_no_name_is_named(
    monkeypatch: pytest.MonkeyPatch, setting: str, name: str
) -> None:
    monkeypatch.setenv(setting, json.dumps(["ok.example", name]))

    with pytest.raises(ConfigError) as raised:
        load_settings([])

    assert str(raised.value).startswith(f"{setting} is ")
    assert f"[1] is {name!r}: expected a host name or IP address, no port" in str(raised.value)
