"""scripts/build_e2b_template.py: what the template it builds holds (no E2B build here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from e2b import Template

from service.config import Settings
from service.proxy.remote.bundle import requirements, source_digest
from service.proxy.remote.placement import Probe, choose_layout

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "build_e2b_template.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_e2b_template", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_template_carries_this_proxy_so_rollouts_upload_nothing(tmp_path: Path) -> None:
    _script().write_context(tmp_path)
    proxy = tmp_path / "rollout-proxy"
    assert (proxy / "src" / "service" / "proxy" / "remote" / "standalone.py").is_file()
    digest = (proxy / "DIGEST").read_text().strip()
    assert digest == source_digest()
    probe = Probe(version=(3, 12), abi="cpython-312-x", libraries=True, digest=digest)
    assert choose_layout(probe).upload == ()


def test_the_template_installs_pinned_opencode_ripgrep_and_the_proxy_libraries(
    tmp_path: Path,
) -> None:
    script = _script()
    version = Settings().opencode_version
    dockerfile = Template.to_dockerfile(script.template(tmp_path, version))
    assert f"opencode-ai@{version}" in dockerfile
    assert "--ignore-scripts" in dockerfile
    assert "/usr/local/bin/opencode" in dockerfile
    assert "ripgrep" in dockerfile
    assert "COPY rollout-proxy /opt/rollout-proxy" in dockerfile
    assert "--target /opt/rollout-proxy/lib" in dockerfile
    assert all(requirement in dockerfile for requirement in requirements())
