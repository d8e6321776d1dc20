"""Pinned agent packages and the shell that installs one under a prefix, from its registry alone.

Each install script writes the package manager's own output to stderr and prints, as its
last stdout line, the *entry*: the path the harness launches (a binary for npm packages, the
`site` directory for PyPI ones). It fails (non-zero, with a message) when the entry does not
answer as the pinned version. The same script installs on the host, into the service's cache
that local sandboxes see read-only, and, for remote sandboxes, inside the sandbox.

| kind          | installed with                                | no package code runs at install |
| ------------- | --------------------------------------------- | ------------------------------- |
| `NpmPackage`  | `npm install --ignore-scripts`, then the      | yes: the platform binary comes  |
|               | platform binary from its optional dependency  | from the registry as a package  |
|               | that answers `--version` as pinned            |                                 |
| `PypiPackage` | `pip install --target <prefix>/site --no-deps | yes: wheels only                |
|               | --only-binary :all:` of a pinned closure, for |                                 |
|               | one CPython minor                             |                                 |
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from typing import Protocol

from service.sandboxes import HOME

__all__ = ["NpmPackage", "Package", "PypiPackage"]

_ERROR_TAIL_CHARS = 2000


class Package(Protocol):
    """A pinned package one harness runs."""

    @property
    def label(self) -> str:
        """`name@version`, as messages name it."""
        ...

    @property
    def slug(self) -> str:
        """Directory under the cache holding one directory per installed version."""
        ...

    @property
    def version(self) -> str: ...

    @property
    def install_id(self) -> str:
        """Names its directory in the cache: changes whenever what is installed does."""
        ...

    @property
    def tool(self) -> str:
        """The host program that installs it (`npm`, `python3.11`)."""
        ...

    @property
    def sandbox_prefix(self) -> str:
        """Where a sandbox without the cache installs it."""
        ...

    def install_script(self, prefix: str) -> str:
        """Shell installing the package under `prefix`, printing the entry last."""
        ...

    def sandbox_script(self, prefix: str) -> str:
        """Shell for a sandbox without the cache: an entry already there, else the install."""
        ...

    def error_message(self, stderr: str) -> str:
        """What of the installer's stderr says why it failed."""
        ...


def _tail(stderr: str, prefix: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith(prefix)]
    return ("\n".join(errors) or stderr.strip())[-_ERROR_TAIL_CHARS:]


@dataclass(frozen=True)
class NpmPackage:
    """An npm package whose program is a prebuilt binary in a per-platform optional dependency.

    `binaries` are paths under `node_modules`, tried in order; `$arch` is npm's CPU name
    (x64, arm64) and `$machine` the kernel's (x86_64, aarch64). The first one whose
    `--version` prints `version_output` is the entry (a CPU without AVX2 falls through to
    a baseline build, say).
    """

    name: str
    version: str
    slug: str
    command: str
    """The program's name on a PATH (a template with it pre-installed)."""
    binaries: tuple[str, ...]
    version_output: str
    tool: str = "npm"

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def install_id(self) -> str:
        return self.version

    @property
    def sandbox_prefix(self) -> str:
        return f"{HOME}/.{self.slug}-npm"

    def install_script(self, prefix: str) -> str:
        p, out = shlex.quote(prefix), shlex.quote(self.version_output)
        candidates = " ".join(f"{p}/node_modules/{b}" for b in self.binaries)
        return f"""set -e
npm install --prefix {p} --ignore-scripts --no-audit --no-fund --no-update-notifier \\
  {shlex.quote(self.label)} >&2
machine="$(uname -m)"
case "$machine" in
  x86_64|amd64) arch=x64 ;; aarch64|arm64) arch=arm64 ;; *) arch="$machine" ;;
esac
for bin in {candidates}; do
  if [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null)" = {out} ]; then
    echo "$bin"; exit 0
  fi
done
echo "no {self.slug} binary for linux-$arch under {p} runs as version {self.version}" >&2
exit 1
"""

    def sandbox_script(self, prefix: str) -> str:
        command, out = shlex.quote(self.command), shlex.quote(self.version_output)
        found = (
            f"if command -v {command} >/dev/null 2>&1 && "
            f'[ "$({command} --version 2>/dev/null)" = {out} ]; then '
            f"command -v {command}; exit 0; fi\n"
        )
        return found + self.install_script(prefix)

    def error_message(self, stderr: str) -> str:
        """npm's `npm error` lines (its warnings are noise here), else the end of its stderr."""
        return _tail(stderr, "npm error")


@dataclass(frozen=True)
class PypiPackage:
    """A PyPI package installed as wheels into `<prefix>/site` for one CPython minor version,
    run by that version's `python3.X` wherever the sandbox has it (its image's, not the
    host's: nothing outside the cache is needed but an interpreter of that version)."""

    name: str
    version: str
    slug: str
    python: str
    """`python3.X` as a sandbox finds it on PATH: runs the agent, and installs it in a
    sandbox without the cache."""
    host_python: str
    """The interpreter (with pip) that installs it on the host: the server's own, whose
    minor version `python` names."""
    requirements: tuple[str, ...]
    """Every distribution to install, each `name==version` (this package's among them),
    installed with `--no-deps`: nothing is left to the resolver."""

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def install_id(self) -> str:
        digest = hashlib.sha256("\n".join(self.requirements).encode()).hexdigest()
        return f"{self.version}-{digest[:12]}"

    @property
    def tool(self) -> str:
        return self.host_python

    @property
    def sandbox_prefix(self) -> str:
        return f"{HOME}/.{self.slug}-pypi"

    def install_script(self, prefix: str) -> str:
        return self._script(shlex.quote(self.host_python), prefix)

    def sandbox_script(self, prefix: str) -> str:
        return self._script(self.python, prefix)

    def error_message(self, stderr: str) -> str:
        """pip's `ERROR:` lines, else the end of its stderr."""
        return _tail(stderr, "ERROR:")

    def _script(self, python: str, prefix: str) -> str:
        site = shlex.quote(f"{prefix}/site")
        requirements = " ".join(shlex.quote(r) for r in self.requirements)
        # The version is read from the installed metadata: importing the package could run
        # its import-time side effects on the host.
        check = (
            "import sys, importlib.metadata as m; sys.path[:0] = [sys.argv[1]]; "
            f"v = m.version({self.name!r}); assert v == {self.version!r}, v"
        )
        return f"""set -e
{python} -m pip install --disable-pip-version-check --no-warn-script-location \
  --no-input --only-binary :all: --no-deps --target {site} {requirements} >&2
{python} -s -c {shlex.quote(check)} {site} >&2
echo {site}
"""
