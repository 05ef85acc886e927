"""A private PostgreSQL cluster for fault tests: made with ``initdb`` in a temporary directory,
on a port of its own, so a test may stop it hard, restart it, kill its connections or run
it out of connections without touching the shared server (``tests.support.common.PG_URL``).

The Debian server binaries (``/usr/lib/postgresql/*/bin``) run as the ``postgres`` OS user
(``runuser`` when the tests run as root); trust authentication on 127.0.0.1; ``fsync`` off
(a test's data need not outlive a power cut, only a server crash) but ``synchronous_commit``
on (an acknowledged commit outlives the server's crash, as on a real server). Connections
are counted by ``application_name``, which a process takes from ``PGAPPNAME``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg


def _bin_dir() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
    return found[-1].parent


def _as_postgres(*args: str) -> list[str]:
    cmd = [str(_bin_dir() / args[0]), *args[1:]]
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """One initdb'd cluster; :meth:`start`, :meth:`stop` (``immediate``: a crash), URLs."""

    def __init__(self, max_connections: int) -> None:
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="onward-pg-"))
        self.data = self.root / "data"
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        subprocess.run(
            _as_postgres("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-N"),
            check=True,
            capture_output=True,
        )
        settings = {
            "port": self.port,
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.root}'",
            "max_connections": max_connections,
            "superuser_reserved_connections": 0,
            "fsync": "off",
            # on: a commit the server acknowledged survives its crash (stop -m immediate),
            # as in production. off let an acknowledged ledger update vanish in the crash
            # while the retried checkpoint after it landed: a "lost" effect record that no
            # real server with synchronous_commit on produces.
            "synchronous_commit": "on",
            "full_page_writes": "off",
            "shared_buffers": "'16MB'",
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{k} = {v}\n" for k, v in settings.items())

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        log = str(self.root / "server.log")
        subprocess.run(
            _as_postgres("pg_ctl", "-D", str(self.data), "-l", log, "-w", "-t", "60", "start"),
            check=True,
            capture_output=True,
        )

    def stop(self, mode: str = "immediate") -> None:
        subprocess.run(
            _as_postgres("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop"),
            check=True,
            capture_output=True,
        )

    def running(self) -> bool:
        status = subprocess.run(
            _as_postgres("pg_ctl", "-D", str(self.data), "status"), capture_output=True
        )
        return status.returncode == 0

    def sql(self, statement: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        with psycopg.connect(self.url(), autocommit=True, application_name="pgcluster") as conn:
            cur = conn.execute(statement.encode(), params)
            return cur.fetchall() if cur.description is not None else []

    def create_database(self, name: str) -> str:
        self.sql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    @contextmanager
    def fresh_database(self) -> Iterator[str]:
        """A new database's URL; the cluster runs again after (a test may stop it)."""
        import uuid

        url = self.create_database(f"t_{uuid.uuid4().hex[:12]}")
        try:
            yield url
        finally:
            if not self.running():
                self.start()

    def connections(self, application_name: str) -> int:
        rows = self.sql(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        )
        [(count,)] = rows
        return int(str(count))

    def terminate(self, application_name: str) -> int:
        """``pg_terminate_backend`` every connection of ``application_name``; how many."""
        rows = self.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        )
        return len(rows)

    def remove(self) -> None:
        if self.running():
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def cluster(max_connections: int = 40) -> Iterator[Cluster]:
    """A started private cluster, stopped and deleted afterwards."""
    made = Cluster(max_connections)
    try:
        made.start()
        yield made
    finally:
        made.remove()
