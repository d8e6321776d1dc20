"""A real PostgreSQL server for the suite: Debian's `postgresql` binaries, a throwaway cluster.

`initdb` into a fresh folder, `pg_ctl start` on a free loopback port with its socket in that
folder, and new databases on demand (`create_database`). PostgreSQL refuses to run as root, so
as root the cluster belongs to `nobody` and its commands run through `runuser`. Durability is
off (fsync, synchronous_commit): the cluster dies with the session anyway.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg

__all__ = ["PostgresServer", "postgres_bin_dir"]

_USER = "rollout"
_RUN_AS = "nobody"


def postgres_bin_dir() -> Path | None:
    """The newest installed PostgreSQL's bin folder, or None (apt-get install postgresql)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_major_version)
    return Path(found[-1]).parent if found else None


def _major_version(initdb: str) -> int:
    return int(Path(initdb).parent.parent.name)


class PostgresServer:
    """One PostgreSQL cluster on 127.0.0.1; `create_database` hands out fresh databases."""

    def __init__(self, bin_dir: Path) -> None:
        self._bin = bin_dir
        self._dir = Path(tempfile.mkdtemp(prefix="rollout-pg-"))
        self._data = self._dir / "data"
        self.port = 0
        self._names = itertools.count(1)

    @property
    def folder(self) -> Path:
        """The cluster's folder (data, socket, log), made at construction, removed by `stop`."""
        return self._dir

    def start(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self._dir, _RUN_AS)
        self._run(
            "initdb",
            "-D",
            self._data,
            "-U",
            _USER,
            "--auth=trust",
            "--no-sync",
            "--locale=C",
            "--encoding=UTF8",
        )
        self.port = _free_port()
        options = (
            f"-p {self.port} -k {self._dir} -c listen_addresses=127.0.0.1"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        log = self._dir / "server.log"
        self._run("pg_ctl", "start", "-w", "-D", self._data, "-l", log, "-o", options)

    def stop(self) -> None:
        if self.port:
            self._run("pg_ctl", "stop", "-D", self._data, "-m", "immediate")
            self.port = 0
        shutil.rmtree(self._dir, ignore_errors=True)

    def url(self, database: str) -> str:
        return f"postgresql://{_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new empty database; returns its URL."""
        name = f"test_{next(self._names)}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def _run(self, program: str, *args: str | Path) -> None:
        command = [str(self._bin / program), *map(str, args)]
        if os.geteuid() == 0:
            command = ["runuser", "-u", _RUN_AS, "--", *command]
        # cwd: runuser keeps root's working folder, which nobody may not be able to enter.
        done = subprocess.run(command, cwd=self._dir, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed ({done.returncode}):\n{done.stdout}{done.stderr}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
