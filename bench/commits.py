"""Cost of a plan step, counted: durable commits and fsyncs per step, and ms per step.

Counts are structural (what the databases were asked to make durable), so they are
noise-free and exact, unlike timings; they are what "one durable commit per plan step"
is checked against. Every number is reported for each onward checkout given, side by
side, so a change can be compared with the release before it in the same run.

What is run
    A declared plan of N ``noop`` steps in a dependency chain, ``Onward(db).run(plan=...)``
    on a fresh store, through onward's public API only, in a child process per checkout
    (``PYTHONPATH=<checkout>/src``). Each count is taken at two lengths (``--steps``,
    default 50 and 200); the per-step figure is the slope between them, so the fixed
    cost of starting and finishing a run drops out. The raw totals are reported too.

SQLite (a fresh ``onward.db`` in a temporary directory)
    * **commits**: transactions committed on any SQLite connection of the child, counted
      with ``sqlite3_commit_hook`` (installed through ``ctypes`` on every connection
      ``sqlite3.connect`` opens; autocommit writes count too). Where the hook cannot be
      reached, ``COMMIT`` statements seen by the trace callback are counted instead and
      the table says so.
    * **fsyncs**: ``fsync``/``fdatasync`` calls of the child, counted with
      ``strace -f -y`` between markers around the run, by file (WAL, database, other).
    * in onward's default mode (WAL, ``synchronous=NORMAL``: a commit appends to the WAL
      and does not fsync; the WAL is synced when it is checkpointed) and with
      ``ONWARD_FSYNC=1`` (``synchronous=FULL``: every commit fsyncs the WAL; artifact
      files are fsynced too).
    * **WAL pages**: pages written to the WAL (``pwrite64`` calls of a 24-byte frame
      header to a ``-wal`` file, in the same strace log): what a commit costs in bytes
      (every page it changed, 4 KB each, whatever part of the page changed).
    * a WAL checkpoint (copying committed pages into the database file) costs three
      fsyncs of its own with FULL: the WAL before copying, the database after, the
      restarted WAL's header. onward's connections checkpoint every 10,000 WAL pages
      (store/sql.py; SQLite's default is 1,000), i.e. every ~500 plan steps of ~19 pages:
      the default lengths (50, 200) contain none, so their slope is the commit alone;
      over longer lengths (``--steps 200 1000``) the checkpoints add ~0.01 per step.
    The window covers ``ow.run`` and closing the store, not opening it.

Postgres (a scratch database created on ``--pg-admin``'s server and dropped afterwards)
    * **xact_commit**: the scratch database's ``pg_stat_database.xact_commit`` delta; it
      counts every transaction, read-only autocommit statements included.
    * **durable commits**: WAL commit records of transactions that wrote to the scratch
      database (``pg_walinspect`` over the window's WAL), i.e. commits the server had to
      flush; read-only transactions have none. Exact even when other databases are busy.
    * **WAL records** of those transactions, and the cluster-wide ``pg_stat_wal`` deltas
      (``wal_records``, ``wal_sync``): these include other databases' work, so the table
      reports how many commits other databases made in the window (0 = clean).
    Each run gets a fresh schema; the store is opened once (migrations) before the window,
    then opened, run and closed inside it. Counters are read once onward's connections have
    ended (a backend flushes its statistics as it exits), after ``pg_stat_clear_snapshot()``.

ms per step
    ``--rounds`` rounds after a warm-up; in each round every checkout runs the chain of
    max(``--steps``) steps once per backend, in an order that rotates from round to round.
    Only ``ow.run`` is timed (no strace, no hooks), by the wall clock and by the child's
    CPU time (all threads); on Postgres also the CPU time of the server's processes that
    serve the scratch database (a local server: read from ``/proc`` by their process
    titles, at 10 ms a tick, so a short run's figure is coarse). Reported: medians, and each
    checkout's paired ratio to the first: the median over rounds of the ratio of the two
    runs in the same round, which drifts less with the machine's load than a ratio of
    medians, with the middle half of the rounds' ratios beside it (``q1-q3``). On a busy
    machine, trust the counts and the CPU ratio; and more rounds: with LangGraph's saves
    handed to a thread pool, a step's CPU moves with the load by ±10 % from round to round.

The child runs any system of ``bench/_systems.py`` (onward, DBOS, LangGraph): this script
runs onward only; ``overhead.py`` uses the same child and counters for all three.

Run from the repo root::

    python bench/commits.py                                   # this checkout only
    python bench/commits.py --onward-src /work/before/src --onward-src src
    python bench/commits.py --onward-rev da5633c --onward-src src   # rev's src/ via git archive

``--no-postgres`` leaves Postgres out; ``--out`` names the JSON file of all results
(default ``bench/results-commits.json``); ``--json`` writes run_all.py's rows.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PREFIX = "@@commits "
"""Marks the child's replies on stdout (anything else it prints is passed over)."""
MARK_DIR = "/onward-bench-mark"
"""``access()`` on paths under here (they do not exist) marks windows in strace's log."""
PG_ADMIN = (
    os.environ.get("ONWARD_BENCH_PG_ADMIN") or "postgresql://postgres@127.0.0.1:5432/postgres"
)


# -- the child: runs plans with one checkout of onward ------------------------------


WRITE_RE = re.compile(
    r"^\s*(INSERT(?:\s+OR\s+\w+)?\s+INTO|UPDATE|DELETE\s+FROM|REPLACE\s+INTO)\s+[\"`]?(\w+)",
    re.IGNORECASE,
)


class CommitLog:
    """Commits on every SQLite connection opened after :meth:`install`, and what each
    transaction wrote ("insert writes + update onward_runs"): the tables by statement kind."""

    def __init__(self) -> None:
        self.count = 0
        self.kinds: dict[str, int] = {}
        self.method = "none"
        self._pending: list[set[str]] = []

    def reset(self) -> None:
        self.count, self.kinds = 0, {}

    def install(self) -> None:
        import sqlite3

        real_connect = sqlite3.connect
        hook = self._commit_hook()
        self.method = "sqlite3_commit_hook" if hook else "COMMIT statements (trace callback)"

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn: sqlite3.Connection = real_connect(*args, **kwargs)
            index = len(self._pending)
            self._pending.append(set())
            conn.set_trace_callback(lambda sql: self._statement(index, sql, hook is None))
            if hook is not None:
                hook(conn, index)
            return conn

        # onward and LangGraph call sqlite3.connect; SQLAlchemy (DBOS) sqlite3.dbapi2.connect.
        sqlite3.connect = sqlite3.dbapi2.connect = connect  # type: ignore[assignment]

    def _statement(self, index: int, sql: str, commits_by_statement: bool) -> None:
        head = sql.lstrip()[:10].upper()
        if m := WRITE_RE.match(sql):
            self._pending[index].add(f"{m.group(1).split()[0].lower()} {m.group(2)}")
        elif head.startswith("ROLLBACK"):
            self._pending[index].clear()
        elif commits_by_statement and head.startswith(("COMMIT", "END")):
            self._committed(index)

    def _committed(self, index: int) -> None:
        self.count += 1
        kind = " + ".join(sorted(self._pending[index])) or "(no write statement seen)"
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        self._pending[index].clear()

    def _commit_hook(self) -> Any:
        """A function installing ``sqlite3_commit_hook`` on a connection, or None when the
        library the ``sqlite3`` module uses cannot be reached (a statically linked build)."""
        import ctypes
        import sqlite3

        probe = sqlite3.connect(":memory:")
        try:
            maps = Path("/proc/self/maps").read_text().splitlines()
        except OSError:
            maps = []
        libs = {ln.split()[-1] for ln in maps if "libsqlite3" in ln and ln.split()[-1][0] == "/"}
        if len(libs) != 1:
            return None
        lib = ctypes.CDLL(libs.pop())
        callback_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
        lib.sqlite3_commit_hook.argtypes = [ctypes.c_void_p, callback_type, ctypes.c_void_p]
        lib.sqlite3_commit_hook.restype = ctypes.c_void_p
        lib.sqlite3_get_autocommit.argtypes = [ctypes.c_void_p]

        def on_commit(arg: int | None) -> int:
            self._committed(arg or 0)
            return 0  # 0: let the commit happen

        callback = callback_type(on_commit)

        def handle(conn: sqlite3.Connection) -> int:
            # CPython's connection object holds its sqlite3* right after the object header.
            return ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value or 0

        # Check that the pointer is the connection's: autocommit is off only inside BEGIN.
        db = handle(probe)
        outside = lib.sqlite3_get_autocommit(db)
        probe.execute("BEGIN")
        inside = lib.sqlite3_get_autocommit(db)
        probe.execute("COMMIT")
        probe.close()
        if outside == 0 or inside != 0:
            return None

        def install(conn: sqlite3.Connection, index: int) -> None:
            # The closure keeps callback alive as long as sqlite3.connect is patched.
            lib.sqlite3_commit_hook(handle(conn), callback, ctypes.c_void_p(index))

        return install


def child(hook: bool) -> int:
    log = CommitLog()
    if hook:
        log.install()
    import _systems
    import onward

    def reply(**fields: Any) -> None:
        sys.stdout.write(PREFIX + json.dumps(fields) + "\n")
        sys.stdout.flush()

    reply(ready=True, onward=onward.__file__, method=log.method)
    for line in sys.stdin:
        job = json.loads(line)
        if job["op"] == "quit":
            break
        mark, clocks = job.get("mark"), []

        db_name = None if job["db"] == "sqlite" else urlsplit(job["db"]).path.lstrip("/")

        @contextmanager
        def window(
            mark: str | None = mark, clocks: list[Any] = clocks, db_name: str | None = db_name
        ) -> Iterator[Any]:
            clocks.append(served_clock(_systems.Clock, db_name))
            if mark:
                os.access(f"{MARK_DIR}/{mark}-start", os.F_OK)
            log.reset()
            yield clocks[-1]
            if mark:
                os.access(f"{MARK_DIR}/{mark}-end", os.F_OK)

        system = job.get("system", "onward")
        try:
            workdir = Path(job["workdir"] or tempfile.gettempdir())
            settings = _systems.run(system, job["db"], workdir, job["steps"], window)
        except RuntimeError as exc:
            reply(error=f"{system}: {exc}")
            return 1
        reply(
            seconds=clocks[-1].seconds,
            cpu=clocks[-1].cpu,
            server_cpu=getattr(clocks[-1], "server", None),
            commits=log.count if hook else None,
            kinds=log.kinds,
            settings=settings,
        )
    return 0


def backends_cpu(db_name: str) -> dict[tuple[int, int], float]:
    """CPU seconds (user + system) of each process of a local Postgres serving ``db_name``,
    by (pid, start time): a backend's process title names its database."""
    tick = os.sysconf("SC_CLK_TCK")
    needle = f" {db_name} ".encode()
    out: dict[tuple[int, int], float] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes()
            if not title.startswith(b"postgres: ") or needle not in title:
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone, or not ours to read
            continue
        out[(int(pid), int(fields[19]))] = (int(fields[11]) + int(fields[12])) / tick
    return out


def served_clock(clock: type[Any], db_name: str | None) -> Any:
    """``clock()`` (``_systems.Clock``), which also sets ``server``: the CPU seconds the
    server's processes serving ``db_name`` spent between start and stop (None without a
    database, or when none was seen: a server on another host). A backend that ended
    inside the window is not counted; one that began inside it is, whole."""
    made = clock()
    if db_name is None:
        return made
    start, stop = made.start, made.stop

    def started() -> None:
        made.before = backends_cpu(db_name)
        start()

    def stopped() -> None:
        stop()
        after = backends_cpu(db_name)
        seen = after or made.before
        made.server = (
            sum(cpu - made.before.get(key, 0.0) for key, cpu in after.items()) if seen else None
        )

    made.start, made.stop = started, stopped
    return made


# -- the parent: drives children, reads the databases' counters ---------------------


@dataclass
class Checkout:
    label: str
    src: Path


@dataclass
class Worker:
    """A child process running one checkout of onward, answering jobs on a pipe."""

    checkout: Checkout
    hook: bool = False
    fsync: bool = False
    strace_log: Path | None = None
    trace: str = "fsync,fdatasync,pwrite64"
    """The calls strace logs (with the marks' access calls): fsyncs and WAL writes on
    SQLite; :data:`SENDS` on Postgres."""
    proc: subprocess.Popen[str] = field(init=False)
    stderr: IO[str] = field(init=False)
    method: str = field(init=False)

    def __post_init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ONWARD_", "OPENAI_"))}
        env.update(
            PYTHONPATH=str(self.checkout.src),
            ONWARD_BLOCK_MODEL_REQUESTS="1",
            ONWARD_FSYNC="1" if self.fsync else "0",
            NO_COLOR="1",
        )
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child"]
        cmd += ["--hook"] if self.hook else []
        if self.strace_log is not None:
            trace = f"trace={self.trace},access,faccessat,faccessat2"
            # --seccomp-bpf: only the traced calls stop the child, so it runs near full speed.
            cmd = [
                "strace",
                "-f",
                "--seccomp-bpf",
                "-y",
                "-qq",
                "-e",
                trace,
                "-e",
                "signal=none",
                "-o",
                str(self.strace_log),
                *cmd,
            ]
        self.stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115  # closed in quit()
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env=env,
            cwd=tempfile.gettempdir(),
        )
        hello = self._read()
        where = Path(hello["onward"]).resolve()
        if not where.is_relative_to(self.checkout.src.resolve()):
            self.quit()
            raise SystemExit(f"{self.checkout.label}: the child imported onward from {where}")
        self.method = hello["method"]

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(PREFIX):
                reply: dict[str, Any] = json.loads(line[len(PREFIX) :])
                if "error" in reply:
                    break
                return reply
        self.stderr.seek(0)
        raise SystemExit(f"{self.checkout.label}: child failed\n{self.stderr.read()[-3000:]}")

    def ask(self, **job: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def run(
        self, db: str, steps: int, mark: str | None = None, system: str = "onward"
    ) -> dict[str, Any]:
        """Run a system (bench/_systems.py) on db: "sqlite" (a new file) or a Postgres URL."""
        with tempfile.TemporaryDirectory(prefix="onward-bench-") as tmp:
            return self.ask(op="run", system=system, db=db, workdir=tmp, steps=steps, mark=mark)

    def quit(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        self.stderr.close()


def fsyncs_by_mark(log: Path) -> dict[str, dict[str, int]]:
    """fsync/fdatasync calls between each mark's start and end, by the file synced; and
    under "wal pages", the pages written to a WAL file (SQLite writes each WAL frame as
    a 24-byte frame header, then the page)."""
    mark_re = re.compile(re.escape(MARK_DIR) + r"/(.+)-(start|end)\"")
    sync_re = re.compile(r"^\d+\s+(?:fsync|fdatasync)\(\d+<([^>]*)>")
    frame_re = re.compile(r"^\d+\s+pwrite64\(\d+<[^>]*-wal>, .*, 24, \d+\) = 24$")
    counts: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in log.read_text().splitlines():
        if m := mark_re.search(line):
            current = m.group(1) if m.group(2) == "start" else None
            counts.setdefault(m.group(1), {})
        elif current is not None and (m := sync_re.match(line)):
            path = m.group(1)
            kind = "wal" if path.endswith("-wal") else "db" if path.endswith(".db") else "other"
            counts[current][kind] = counts[current].get(kind, 0) + 1
        elif current is not None and frame_re.match(line):
            counts[current]["wal pages"] = counts[current].get("wal pages", 0) + 1
    return counts


SENDS = "sendto,sendmsg,write"
"""A Postgres client's messages to the server: libpq writes its output buffer with
``send`` (``sendto``) when it flushes, once per message or per batch it sends."""


def sends_by_mark(log: Path) -> dict[str, int]:
    """Writes to a socket between each mark's start and end (``strace -y`` names the fd)."""
    mark_re = re.compile(re.escape(MARK_DIR) + r"/(.+)-(start|end)\"")
    send_re = re.compile(r"^\d+\s+(?:sendto|sendmsg|write)\(\d+<(?:TCP|TCPv6|UNIX|socket)")
    counts: dict[str, int] = {}
    current: str | None = None
    for line in log.read_text().splitlines():
        if m := mark_re.search(line):
            current = m.group(1) if m.group(2) == "start" else None
            counts.setdefault(m.group(1), 0)
        elif current is not None and send_re.match(line):
            counts[current] += 1
    return counts


def slope(totals: Mapping[int, float]) -> float:
    (n1, c1), (n2, c2) = sorted(totals.items())[0], sorted(totals.items())[-1]
    return (c2 - c1) / (n2 - n1)


def count_sqlite(
    checkout: Checkout, steps: list[int], fsync: bool, system: str = "onward"
) -> dict[str, Any]:
    """Commits and fsyncs of a system's runs on fresh SQLite files (fsync: ONWARD_FSYNC=1,
    synchronous=FULL for every system), and the settings read back from its connection."""
    with tempfile.TemporaryDirectory(prefix="onward-bench-strace-") as tmp:
        log = Path(tmp) / "strace.log"
        worker = Worker(checkout, hook=True, fsync=fsync, strace_log=log)
        try:
            worker.run("sqlite", 2, system=system)  # warm-up: first-use costs stay out
            replies = {n: worker.run("sqlite", n, mark=f"n{n}", system=system) for n in steps}
        finally:
            worker.quit()
        syncs = fsyncs_by_mark(log)
    commits = {n: int(r["commits"]) for n, r in replies.items()}
    pages = {n: syncs.get(f"n{n}", {}).pop("wal pages", 0) for n in steps}
    fsyncs = {n: sum(syncs.get(f"n{n}", {}).values()) for n in steps}
    kinds = {k for r in replies.values() for k in r["kinds"]}
    return {
        "commit_counter": worker.method,
        "commits": commits,
        "fsyncs": fsyncs,
        "fsyncs_by_file": {n: syncs.get(f"n{n}", {}) for n in steps},
        "commits_by_kind": {
            k: {n: r["kinds"].get(k, 0) for n, r in replies.items()} for k in sorted(kinds)
        },
        "commits_per_step": slope(commits),
        "fsyncs_per_step": slope(fsyncs),
        "wal_pages": pages,
        "wal_pages_per_step": slope(pages),
        "settings": replies[steps[-1]]["settings"],
    }


# -- Postgres ------------------------------------------------------------------------


def _url(admin: str, dbname: str, schema: str | None = None) -> str:
    parts = urlsplit(admin)
    query = f"options=-csearch_path%3D{schema}" if schema else ""
    return urlunsplit((parts.scheme, parts.netloc, f"/{dbname}", query, ""))


@contextmanager
def scratch_database(admin: str) -> Iterator[str]:
    """A fresh database on the admin URL's server (with pg_walinspect), dropped afterwards."""
    import psycopg

    name = f"onward_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        with psycopg.connect(_url(admin, name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        yield name
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def fresh_schema(admin: str, dbname: str) -> str:
    import psycopg

    schema = f"s_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_url(admin, dbname), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return _url(admin, dbname, schema)


def pg_counters(admin: str, dbname: str) -> dict[str, Any]:
    """The scratch database's and the cluster's counters, once no one is connected to it."""
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        deadline = time.monotonic() + 30
        while conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (dbname,)
        ).fetchone() != (0,):
            if time.monotonic() > deadline:
                raise SystemExit(f"connections to {dbname} did not end")
            time.sleep(0.02)
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = %s),"
            " (SELECT coalesce(sum(xact_commit), 0) FROM pg_stat_database"
            "  WHERE datname IS DISTINCT FROM %s AND datname IS DISTINCT FROM current_database()),"
            " w.wal_records, w.wal_sync, w.wal_write, pg_current_wal_insert_lsn()::text,"
            " pg_current_wal_flush_lsn()::text, (SELECT oid FROM pg_database WHERE datname = %s)"
            " FROM pg_stat_wal w",
            (dbname, dbname, dbname),
        ).fetchone()
    assert row is not None
    keys = ["xact_commit", "others_commit", "wal_records", "wal_sync", "wal_write"]
    return dict(zip(keys, (int(v) for v in row[:5]), strict=True)) | {
        "insert_lsn": row[5],
        "flush_lsn": row[6],
        "oid": row[7],
    }


def wal_of_database(admin: str, dbname: str, start: str, end: str, oid: int) -> tuple[int, int]:
    """(commit records, all records) of transactions that wrote to the database."""
    import psycopg

    with psycopg.connect(_url(admin, dbname), autocommit=True) as conn:
        row = conn.execute(
            "WITH r AS (SELECT * FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)),"
            " ours AS (SELECT DISTINCT xid FROM r WHERE xid <> '0'::xid"
            "  AND block_ref ~ ('rel [0-9]+/' || %s || '/'))"
            " SELECT count(*) FILTER (WHERE resource_manager = 'Transaction'"
            "  AND record_type LIKE 'COMMIT%%'), count(*)"
            " FROM r WHERE xid IN (SELECT xid FROM ours)",
            (start, end, str(oid)),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def count_postgres(
    worker: Worker, admin: str, dbname: str, steps: list[int], system: str = "onward"
) -> dict[str, Any]:
    worker.run(fresh_schema(admin, dbname), 2, system=system)  # warm-up, as on SQLite
    totals: dict[str, dict[int, int]] = {
        k: {}
        for k in (
            "xact_commit",
            "durable_commits",
            "wal_records_ours",
            "wal_records",
            "wal_sync",
            "others_commit",
        )
    }
    for n in steps:
        url = fresh_schema(admin, dbname)
        worker.run(url, 1, system=system)  # migrations, outside the window
        before = pg_counters(admin, dbname)
        settings = worker.run(url, n, mark=f"n{n}", system=system)["settings"]
        after = pg_counters(admin, dbname)
        durable, records = wal_of_database(
            admin, dbname, before["insert_lsn"], after["flush_lsn"], after["oid"]
        )
        for key in ("xact_commit", "wal_records", "wal_sync", "others_commit"):
            totals[key][n] = after[key] - before[key]
        totals["durable_commits"][n] = durable
        totals["wal_records_ours"][n] = records
    if worker.strace_log is not None and worker.trace == SENDS:
        sent = sends_by_mark(worker.strace_log)
        totals["sends"] = {n: sent.get(f"n{n}", 0) for n in steps}
    per_step = {k: slope(v) for k, v in totals.items()}
    return {"totals": totals, "per_step": per_step, "settings": settings}


# -- the run -------------------------------------------------------------------------


def checkout_label(src: Path) -> str:
    sha = subprocess.run(
        ["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(src), "status", "--porcelain", "--", "."], capture_output=True, text=True
    ).stdout.strip()
    name = src.resolve().parent.name
    return f"{name}@{sha}{'+' if dirty else ''}" if sha else name


def from_rev(rev: str, into: Path) -> Checkout:
    """``src/`` of a revision of this repository, extracted (no worktree is created)."""
    target = into / rev
    target.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "src"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return Checkout(f"{rev} (git archive)", target / "src")


Rounds = dict[str, dict[str, list[float]]]
"""ms per step of every round, by backend and checkout label."""


def time_rounds(
    workers: list[Worker], backends: dict[str, Any], steps: int, rounds: int
) -> dict[str, Rounds]:
    """Wall and CPU (the child process's, all threads) ms per step of every round."""
    out: dict[str, Rounds] = {
        clock: {b: {w.checkout.label: [] for w in workers} for b in backends}
        for clock in ("wall", "cpu", "server_cpu")
    }
    for w in workers:  # warm-up
        for db in backends.values():
            w.run(db(), 5)
    for r in range(rounds):
        for backend, db in backends.items():
            order = workers[r % len(workers) :] + workers[: r % len(workers)]
            for w in order:
                print(f"  round {r + 1}/{rounds}: {backend}, {w.checkout.label}", flush=True)
                reply = w.run(db(), steps)
                out["wall"][backend][w.checkout.label].append(reply["seconds"] * 1000 / steps)
                out["cpu"][backend][w.checkout.label].append(reply["cpu"] * 1000 / steps)
                if reply.get("server_cpu") is not None:
                    server = out["server_cpu"][backend][w.checkout.label]
                    server.append(reply["server_cpu"] * 1000 / steps)
    return out


def add_checkout_args(parser: argparse.ArgumentParser) -> None:
    """``--onward-src PATH`` and ``--onward-rev REV``, repeatable, in the order given."""
    parser.add_argument(
        "--onward-src",
        dest="checkouts",
        action="append",
        type=lambda s: ("src", s),
        metavar="PATH",
        help="a checkout's src/ dir (repeatable; default ./src)",
    )
    parser.add_argument(
        "--onward-rev",
        dest="checkouts",
        action="append",
        type=lambda s: ("rev", s),
        metavar="REV",
        help="src/ of this repo's REV, via git archive (repeatable)",
    )


def checkouts_of(args: argparse.Namespace, revs: Path) -> list[Checkout]:
    """The checkouts :func:`add_checkout_args` asked for (a REV unpacked under ``revs``)."""
    return [
        from_rev(v, revs) if kind == "rev" else Checkout(checkout_label(Path(v)), Path(v).resolve())
        for kind, v in (args.checkouts or [("src", str(REPO / "src"))])
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_checkout_args(parser)
    parser.add_argument(
        "--steps",
        type=int,
        nargs=2,
        default=[50, 200],
        metavar=("N1", "N2"),
        help="the two chain lengths counted (default 50 200)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument(
        "--pg-admin",
        default=PG_ADMIN,
        help="a Postgres URL allowed to create databases ($ONWARD_BENCH_PG_ADMIN)",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results-commits.json")
    parser.add_argument("--json", type=Path, help="also write run_all.py's rows here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--hook", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.hook)
    steps = sorted(args.steps)
    if steps[0] < 1 or steps[0] == steps[1] or args.rounds < 1:
        parser.error("--steps needs two different lengths ≥ 1, --rounds ≥ 1")
    if shutil.which("strace") is None:
        parser.error("strace is needed to count fsyncs (apt-get install strace)")
    with tempfile.TemporaryDirectory(prefix="onward-bench-revs-") as revs:
        checkouts = checkouts_of(args, Path(revs))
        if len({c.label for c in checkouts}) != len(checkouts):
            for i, c in enumerate(checkouts):
                c.label = f"{i + 1}:{c.label}"
        results = measure(
            checkouts, steps, args.rounds, None if args.no_postgres else args.pg_admin
        )
    results["checkouts"] = {c.label: str(c.src) for c in checkouts}
    args.out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    rows = report(results, [c.label for c in checkouts], steps, args.rounds)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


def measure(
    checkouts: list[Checkout], steps: list[int], rounds: int, admin: str | None
) -> dict[str, Any]:
    out: dict[str, Any] = {"steps": steps, "rounds": rounds, "sqlite": {}, "postgres": {}}
    for c in checkouts:
        for fsync in (False, True):
            print(f"counting: {c.label}, sqlite, ONWARD_FSYNC={int(fsync)}", flush=True)
            out["sqlite"].setdefault(c.label, {})[f"fsync={int(fsync)}"] = count_sqlite(
                c, steps, fsync
            )
    workers = [Worker(c) for c in checkouts]
    try:
        backends: dict[str, Any] = {"sqlite": lambda: "sqlite"}
        if admin is None:
            out["ms_per_step"] = time_rounds(workers, backends, steps[-1], rounds)
            return out
        with scratch_database(admin) as dbname:
            for w in workers:
                print(f"counting: {w.checkout.label}, postgres", flush=True)
                out["postgres"][w.checkout.label] = count_postgres(w, admin, dbname, steps)
            backends["postgres"] = lambda: fresh_schema(admin, dbname)
            out["ms_per_step"] = time_rounds(workers, backends, steps[-1], rounds)
    finally:
        for w in workers:
            w.quit()
    return out


def paired(by_label: dict[str, list[float]], label: str, base: str) -> float:
    """The median over rounds of label's time ÷ base's in the same round: runs next to each
    other share the machine's load, so this drifts less than a ratio of medians."""
    ratios = _ratios(by_label, label, base)
    return statistics.median(ratios) if ratios else float("nan")


def _ratios(by_label: dict[str, list[float]], label: str, base: str) -> list[float]:
    return [a / b for a, b in zip(by_label[label], by_label[base], strict=True) if b]


def spread(by_label: dict[str, list[float]], label: str, base: str) -> str:
    """The paired ratios' middle half (first to third quartile), as ``, q1-q3``: how far
    the rounds disagree, which the machine's load sets (empty for the base itself, or
    with fewer than four rounds)."""
    ratios = _ratios(by_label, label, base)
    if label == base or len(ratios) < 4:
        return ""
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    return f", {q1:.2f}-{q3:.2f}"


def report(
    results: dict[str, Any], labels: list[str], steps: list[int], rounds: int
) -> list[dict[str, Any]]:
    from rich.console import Console
    from rich.table import Table

    n1, n2 = steps

    def cell(per_step: float, totals: dict[Any, int]) -> str:
        return f"{per_step:.2f}  ({totals[n1]} / {totals[n2]})"

    table = Table(
        title=f"per plan step: slope between {n1} and {n2} steps (raw totals {n1} / {n2})"
    )
    table.add_column("measure", no_wrap=True)
    for label in labels:
        table.add_column(label, justify="right", no_wrap=True)
    for mode in ("fsync=0", "fsync=1"):
        name = "default" if mode == "fsync=0" else "ONWARD_FSYNC=1"
        for what in ("commits", "fsyncs", "wal_pages"):
            table.add_row(
                f"sqlite {name}: {what.replace('_', ' ')}",
                *(
                    cell(
                        results["sqlite"][lb][mode][f"{what}_per_step"],
                        results["sqlite"][lb][mode][what],
                    )
                    for lb in labels
                ),
            )
    pg = results["postgres"]
    pg_rows = [
        ("durable_commits", "postgres: durable commits (WAL commit records)"),
        ("xact_commit", "postgres: xact_commit (incl. read-only)"),
        ("wal_records_ours", "postgres: WAL records of its transactions"),
        ("wal_sync", "postgres: pg_stat_wal wal_sync (cluster)"),
        ("wal_records", "postgres: pg_stat_wal wal_records (cluster)"),
        ("others_commit", "postgres: commits in other databases (noise; 0 = clean)"),
    ]
    for key, name in pg_rows if pg else []:
        table.add_row(
            name, *(cell(pg[lb]["per_step"][key], pg[lb]["totals"][key]) for lb in labels)
        )
    ms, base = results["ms_per_step"], labels[0]
    clocks = (
        ("wall", "ms per step"),
        ("cpu", "CPU ms per step (child)"),
        ("server_cpu", "CPU ms per step (server's backends)"),
    )
    for backend in ms["wall"]:
        for clock, what in clocks:
            by_label = ms.get(clock, {}).get(backend, {})
            if any(len(by_label.get(lb, ())) != rounds for lb in labels):
                continue  # SQLite has no server; a server on another host is not seen
            table.add_row(
                f"{backend}: {what}, median of {rounds} (× paired, middle half)",
                *(
                    f"{statistics.median(by_label[lb]):.3f}  (×{paired(by_label, lb, base):.2f}"
                    f"{spread(by_label, lb, base)})"
                    for lb in labels
                ),
            )
    console = Console(width=max(150, shutil.get_terminal_size((150, 24)).columns))
    console.print(table)
    methods = {results["sqlite"][lb]["fsync=0"]["commit_counter"] for lb in labels}
    console.print(f"sqlite commits counted with: {', '.join(sorted(methods))}")
    kinds = Table(title=f"sqlite transactions by what they wrote, per plan step ({n1} → {n2})")
    kinds.add_column("tables written in the transaction")
    for label in labels:
        kinds.add_column(label, justify="right", no_wrap=True)
    by_kind = [results["sqlite"][lb]["fsync=0"]["commits_by_kind"] for lb in labels]
    for kind in sorted({k for b in by_kind for k in b}):
        counts = [b.get(kind, {n1: 0, n2: 0}) for b in by_kind]
        kinds.add_row(kind, *(cell(slope(c), c) for c in counts))
    console.print(kinds)

    first, last = labels[0], labels[-1]
    versus = f"{first}: " if len(labels) > 1 else ""
    rows: list[dict[str, Any]] = []

    def count_row(measure: str, ours: float, before: float) -> None:
        rows.append(
            {
                "bench": "commits.py",
                "measure": measure,
                "onward": round(ours, 2),
                "baseline": f"{versus}{before:.2f}" if versus else "—",
                "ratio": None,
                "target": "≤ 1",
                "met": ours <= 1.0 + 1e-9,
            }
        )

    sq = results["sqlite"]
    count_row(
        "SQLite commits per plan step (structural)",
        sq[last]["fsync=0"]["commits_per_step"],
        sq[first]["fsync=0"]["commits_per_step"],
    )
    count_row(
        "SQLite fsyncs per plan step, ONWARD_FSYNC=1",
        sq[last]["fsync=1"]["fsyncs_per_step"],
        sq[first]["fsync=1"]["fsyncs_per_step"],
    )
    if pg:
        count_row(
            "Postgres durable commits per plan step (WAL commit records)",
            pg[last]["per_step"]["durable_commits"],
            pg[first]["per_step"]["durable_commits"],
        )
    for backend, by_label in ms["wall"].items():
        ours, before = statistics.median(by_label[last]), statistics.median(by_label[first])
        ratio = paired(by_label, last, first)
        rows.append(
            {
                "bench": "commits.py",
                "measure": f"ms per no-op step, {backend}, {last} vs {first}",
                "onward": round(ours, 3),
                "baseline": f"{versus}{before:.3f}" if versus else "—",
                "ratio": round(ratio, 2),
                "target": "≤ 1.1",
                "met": ratio <= 1.1,
            }
        )
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
