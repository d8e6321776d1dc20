"""Which interpreter the stdlib-only sandbox helpers run on (`service.host_python`): the
server's own when every user can run it, else the host's of the same version, else one this
uid can run (said at start, with what to do), else none (the server refuses to start)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from service import host_python as module
from service.errors import MissingDependencyError
from service.host_python import HostPython, host_python

HOST = HostPython("/usr/bin/python3.x", "/usr/lib/python3.x")


@pytest.fixture(autouse=True)
def _uncached() -> Iterator[None]:
    host_python.cache_clear()
    yield
    host_python.cache_clear()


def _world(
    monkeypatch: pytest.MonkeyPatch, *, open_to_all: set[str], host: HostPython | None = HOST
) -> None:
    monkeypatch.setattr(module, "_open_to_all", lambda path: path in open_to_all)
    monkeypatch.setattr(module, "_host_interpreter", lambda: host)


def test_the_servers_own_when_every_user_can_run_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _world(monkeypatch, open_to_all={sys.executable, HOST.executable})
    assert host_python().executable == sys.executable


def test_the_hosts_of_the_same_version_when_the_own_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A venv made from pyenv's python under /root: its link is closed to other users.
    _world(monkeypatch, open_to_all={HOST.executable})
    assert host_python() == HOST


def test_a_closed_one_this_uid_runs_is_used_and_said_at_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _world(monkeypatch, open_to_all=set(), host=None)
    with caplog.at_level(logging.WARNING, logger=module.__name__):
        assert host_python().executable == sys.executable
    [record] = caplog.records
    assert "which other users cannot run" in record.getMessage()
    assert "make install PYTHON=/usr/bin/python3" in record.getMessage()


def test_none_this_uid_can_run_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    closed = tmp_path / "python"
    closed.write_text("")
    closed.chmod(0o600)
    monkeypatch.setattr(sys, "executable", str(closed))
    _world(monkeypatch, open_to_all=set(), host=None)
    assert not os.access(closed, os.X_OK)  # no execute bit: not even root runs it
    with pytest.raises(MissingDependencyError, match="make install PYTHON=/usr/bin/python3"):
        host_python()


def test_open_to_all_needs_every_directory_above_searchable(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)  # as pyenv's versions under /root are
    interpreter = closed / "python"
    interpreter.write_text("")
    interpreter.chmod(0o755)
    assert not module._open_to_all(str(interpreter))
    assert module._open_to_all("/bin/sh")
