"""The service's cache in a local sandbox: always there, read-only, live.

A sandbox made before the cache directory existed (a new machine; the warm sandbox made at
start-up) used to lack the mount silently, so opencode fell back to npm with no network.
"""

from __future__ import annotations

from pathlib import Path

from service.config import Settings
from service.sandboxes.local.backend import LocalSandbox
from service.sandboxes.local.bwrap import SandboxLayout, holder_argv, host_view
from tests.sandboxes.conftest import MakeSandbox


def test_the_cache_is_bound_even_when_it_does_not_exist_yet(tmp_path: Path) -> None:
    cache = tmp_path / "not-yet"
    view = host_view(Settings(state_dir=tmp_path / "state", cache_dir=cache), "/usr/bin")
    layout = SandboxLayout(tmp_path / "state" / "sandboxes" / "r1", None)

    argv = holder_argv("bwrap", view, layout)

    # Unconditional: bwrap fails loudly on a missing source rather than leave it out.
    assert ["--ro-bind", str(cache), str(cache)] in [argv[i : i + 3] for i in range(len(argv))]


async def test_a_sandbox_made_before_the_cache_existed_sees_it_and_later_installs(
    local_settings: Settings, make_local_sandbox: MakeSandbox
) -> None:
    cache = local_settings.cache_dir
    assert not cache.exists()
    sandbox: LocalSandbox = await make_local_sandbox("r-cache")
    try:
        installed = cache / "opencode" / "1.0" / "installed-binary"
        installed.parent.mkdir(parents=True)
        installed.write_text("/bin/true\n")  # written on the host after the sandbox exists

        seen = await sandbox.exec(f"cat {installed}", timeout_s=30)
        write = await sandbox.exec(f"echo x > {cache}/opencode/planted", timeout_s=30)
    finally:
        await sandbox.kill()

    assert (seen.exit_code, seen.stdout) == (0, "/bin/true\n")
    assert write.exit_code != 0, "the agent must not be able to change the cache"
    assert not (cache / "opencode" / "planted").exists()
