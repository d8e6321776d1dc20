"""Build an E2B template with opencode (pinned) and the capture proxy pre-installed.

    E2B_API_KEY=e2b_... python scripts/build_e2b_template.py --name rollout-opencode
    python scripts/build_e2b_template.py --print     # show the steps as a Dockerfile; no build

Then run rollouts with `sandbox.template = "rollout-opencode"` (or make it the server's
default with ROLLOUT_E2B_TEMPLATE=rollout-opencode). On E2B's base image it adds:

- opencode-ai at the service's pinned version (`Settings.opencode_version`), installed by the
  harness's own install script (npm, no install scripts run, the platform binary picked by
  `--version`) and linked as /usr/local/bin/opencode: the harness finds it and skips npm;
- ripgrep, which opencode's grep and glob tools run (else they try to download it);
- the capture proxy at /opt/rollout-proxy: this checkout's sources and their digest, and its
  libraries (httptools, orjson, pydantic, uvloop at this machine's versions) in a directory of
  their own, so a task's python packages are untouched. A rollout whose service has the same
  sources uploads nothing; after a service upgrade it uploads the sources only (~30 KB):
  rebuild the template to save even that.

Build again whenever opencode_version changes (else every rollout npm-installs opencode).
"""

from __future__ import annotations

import argparse
import io
import shlex
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2b import Template, default_build_logger
from e2b.template.main import TemplateBuilder

from service.agents import install_script
from service.config import Settings
from service.proxy import TEMPLATE_DIR, requirements, sources_tarball

OPENCODE_PREFIX = "/opt/opencode"
PROXY_CONTEXT = "rollout-proxy"
"""The proxy's sources (src/, DIGEST) inside the build context."""


def template(context: Path, opencode_version: str) -> TemplateBuilder:
    """The template's steps; `context` holds PROXY_CONTEXT (see `write_context`)."""
    opencode = shlex.quote(install_script(opencode_version, OPENCODE_PREFIX))
    pip = (
        f"PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir --target "
        f"{TEMPLATE_DIR}/lib {shlex.join(requirements())}"
    )
    check_proxy = (
        f'python3 -I -c \'import sys; sys.path[:0] = ["{TEMPLATE_DIR}/src", '
        f'"{TEMPLATE_DIR}/lib"]; import service.proxy.remote.standalone\''
    )
    return (
        Template(file_context_path=str(context))
        .from_base_image()
        .apt_install(["ripgrep"])
        .run_cmd("python3 -c 'import sys; assert sys.version_info >= (3, 11), sys.version'")
        .run_cmd(
            f'bin="$(bash -c {opencode})" && ln -sf "$bin" /usr/local/bin/opencode', user="root"
        )
        .run_cmd(f'test "$(opencode --version)" = {shlex.quote(opencode_version)}')
        .copy(PROXY_CONTEXT, TEMPLATE_DIR, user="root", mode=0o755)
        .run_cmd(pip, user="root")
        .run_cmd(f"python3 -m compileall -q {TEMPLATE_DIR}/src", user="root")
        .run_cmd(f"chmod -R a+rX {TEMPLATE_DIR}", user="root")
        .run_cmd(check_proxy)
    )


def write_context(context: Path) -> None:
    """Unpack the proxy's sources and digest (exactly what a rollout would upload)."""
    with tarfile.open(fileobj=io.BytesIO(sources_tarball()), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(context / PROXY_CONTEXT, filter="data")
        else:
            # Python before 3.11.4 (Debian 12 ships 3.11.2) has no extraction filters; the
            # tarball is this checkout's own sources, so plain files under the target suffice.
            for member in tar.getmembers():
                parts = Path(member.name).parts
                if not (member.isfile() or member.isdir()) or ".." in parts or parts[:1] == ("/",):
                    raise SystemExit(f"unexpected member in the proxy sources: {member.name}")
            tar.extractall(context / PROXY_CONTEXT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default="rollout-opencode", help="template name[:tag]")
    parser.add_argument("--cpu-count", type=int, default=2)
    parser.add_argument("--memory-mb", type=int, default=2048)
    parser.add_argument("--print", action="store_true", help="print a Dockerfile; do not build")
    args = parser.parse_args()
    version = Settings().opencode_version
    with tempfile.TemporaryDirectory() as directory:
        context = Path(directory)
        write_context(context)
        steps = template(context, version)
        if args.print:
            print(Template.to_dockerfile(steps))
            return
        info = Template.build(
            steps,
            name=args.name,
            cpu_count=args.cpu_count,
            memory_mb=args.memory_mb,
            on_build_logs=default_build_logger(),
        )
    print(f"built template {info.name} (id {info.template_id}, build {info.build_id})")


if __name__ == "__main__":
    main()
