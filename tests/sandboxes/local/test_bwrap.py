"""What the bwrap command line shows of the host (pure functions, no sandbox started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.config import Settings
from service.sandboxes.local.bwrap import (
    HostView,
    SandboxLayout,
    command_tag,
    holder_argv,
    host_view,
    sandbox_env,
    sandbox_uid,
)

_PATH = "/root/.pyenv/shims:/home/alice/.local/bin:/usr/bin:relative/bin:/root/.pyenv/bin"


def _settings(state: str, cache: str = "/var/cache/rollout-test") -> Settings:
    return Settings(state_dir=Path(state), cache_dir=Path(cache))


def test_tool_installs_under_hidden_homes_are_exposed() -> None:
    view = host_view(_settings("/var/lib/rollout-test"), _PATH)
    assert view.exposed[:2] == ("/root/.pyenv", "/home/alice/.local")
    assert view.path == "/root/.pyenv/shims:/home/alice/.local/bin:/usr/bin:/root/.pyenv/bin"
    assert view.shared == ("/var/cache/rollout-test",)


@pytest.mark.parametrize(
    ("state", "hidden"),
    [
        ("/var/lib/rollout-test", ("/var/lib/rollout-test",)),  # visible: needs its tmpfs
        ("/root/.local/state/rollout", ()),  # under a hidden home already
        ("/tmp/rollout-state", ()),  # under the private /tmp already
        ("/root/.pyenv/rollout-state", ("/root/.pyenv/rollout-state",)),  # exposed again
    ],
)
def test_state_dir_is_always_hidden(state: str, hidden: tuple[str, ...]) -> None:
    assert host_view(_settings(state), _PATH).hidden == hidden


def test_state_dir_inside_the_visible_cache_is_refused() -> None:
    with pytest.raises(ValueError, match="cache_dir"):
        host_view(_settings("/var/cache/rollout-test/state"), _PATH)


def test_environment_is_the_basics_plus_the_callers() -> None:
    view = host_view(_settings("/var/lib/rollout-test"), "/usr/bin")
    env = sandbox_env(view, {"TERM": "xterm", "GIVEN": "1"})
    assert env == {
        "PATH": "/usr/bin",
        "HOME": "/home/user",
        "USER": "user",
        "LANG": "C.UTF-8",
        "TERM": "xterm",
        "GIVEN": "1",
    }
    for bad in ({"A=B": "x"}, {"": "x"}, {"OK": "nul\0"}):
        with pytest.raises(ValueError, match="environment variable"):
            sandbox_env(view, bad)


def test_each_sandbox_gets_its_own_high_uid() -> None:
    uids = {sandbox_uid(Path("/state"), f"r{i}") for i in range(1000)}
    assert len(uids) >= 999
    assert min(uids) >= 0x6000_0000
    assert max(uids) < 0x6100_0000
    assert sandbox_uid(Path("/state"), "r1") == sandbox_uid(Path("/state"), "r1")
    assert sandbox_uid(Path("/other"), "r1") != sandbox_uid(Path("/state"), "r1")


def test_command_tags_are_no_sandbox_uid() -> None:
    tags = {command_tag(serial) for serial in (1, 2, (1 << 24) + 1, (1 << 24) + 2)}
    assert len(tags) == 2
    assert all(0x6100_0000 <= tag < 0x6200_0000 for tag in tags)  # above every sandbox uid


def test_server_code_in_the_hosts_tmp_is_bound_back_over_the_sandboxs_tmp() -> None:
    """A checkout under /tmp (as in CI) must stay visible: the forwarder runs from it."""
    view = HostView(("/root/.pyenv", "/tmp/checkout"), ("/tmp/checkout/.state",), (), "/usr/bin")
    layout = SandboxLayout(Path("/srv/sb"), uid=None)
    args = holder_argv("bwrap", view, layout)
    own_tmp = args.index(str(layout.tmp))
    binds = [i for i, arg in enumerate(args) if arg == "/tmp/checkout"]
    assert binds
    assert binds[-1] > own_tmp
    assert args[args.index("/tmp/checkout/.state", own_tmp) - 1] == "--tmpfs"
