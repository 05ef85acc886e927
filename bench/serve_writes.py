"""What one served run asks of its database, counted, not timed: on SQLite the takes of
onward's write lock of the file (``onward.store.writelock``: every transaction, commit and
single write of the process queues there) and how long they were held; on Postgres the
statements the server sent (each ``psycopg`` cursor's ``execute`` and ``executemany``, an
``executemany`` of several rows counted once), with the most frequent by their first words.

Each server is ``onward serve`` with a counter loaded at start-up (``bench/_counted``). The
users stream runs of ``serve_users.py``'s 3-step no-op plan, each on a new thread, through
``langgraph_sdk``; a warm-up round (the server's clients, connections and compiled graph
are made) is not counted.

    python bench/serve_writes.py [--users 10] [--runs-per-user 4] [--before DIR]

``--before DIR``: also count a server from the source tree DIR (e.g. a ``git worktree``
of an earlier commit), named ``before ...``. Counts hold on a loaded host too; the held
milliseconds do not (a holder also waits for the GIL), so compare them within a run. The
durability each tree's SQLite connections open with is read back and printed (every
server runs at its tree's default, ``ONWARD_FSYNC`` unset), as are Postgres's settings.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import serve_users as su
from _common import pg_durability, pg_schema

COUNTED = Path(__file__).parent / "_counted"


def counted_server(
    stack: ExitStack, name: str, db: str, port: int, out: Path, src: Path | None
) -> su.Server:
    """``onward serve`` with the counter on its path (before ``src``'s tree, if given)."""
    path = [*([str(src.resolve() / "src")] if src else []), str(COUNTED)]
    saved = dict(os.environ)
    os.environ |= {"PYTHONPATH": os.pathsep.join(path), "SERVE_WRITES_OUT": str(out)}
    try:
        return su.onward_server(
            stack, name, db, port, "serve-writes" if "postgres" in name else None
        )
    finally:
        os.environ.clear()
        os.environ.update(saved)


_READ_BACK = """
import sqlite3, sys, tempfile
from onward import Onward
from onward.store.sql import Db
names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
with tempfile.TemporaryDirectory() as tmp, Onward(f"sqlite:///{tmp}/o.db") as ow:
    main = ow.store.conn.execute("PRAGMA synchronous").fetchone()[0]
    side = Db.open(f"{tmp}/o.db")
    other = side.execute("PRAGMA synchronous").fetchone()[0]
    mode = side.execute("PRAGMA journal_mode").fetchone()[0]
    side.close()
print(f"journal_mode={mode} synchronous={names[main]} (checkpoints),",
      f"{names[other]} (other connections)")
"""


def sqlite_durability_of(src: Path | None) -> str:
    """What a tree's SQLite store opens with, read back in a process of that tree: the
    checkpointer's connection and the others (before d145ee4 they differed)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src.resolve() / "src")
    done = subprocess.run(
        [sys.executable, "-c", _READ_BACK], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def drive(server: su.Server, users: int, runs: int) -> int:
    """``runs`` runs, ``users`` at a time; the number that did not end done."""
    with ThreadPoolExecutor(users) as pool:
        got = list(pool.map(lambda i: su.one_run(server, i % users), range(runs)))
    return sum(r.why is not None for r in got)


def count(name: str, db: str, port: int, src: Path | None, users: int, each: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        out = Path(tmp) / "counts.json"
        server = counted_server(stack, name, db, port, out, src)
        errors = drive(server, users, users)  # warm-up: not counted
        os.kill(server.pid, signal.SIGUSR1)
        time.sleep(0.5)
        runs = users * each
        errors += drive(server, users, runs)
        stack.close()  # SIGTERM: the counter writes its file
        for _ in range(100):
            if out.exists() and out.stat().st_size:
                break
            time.sleep(0.1)
        found = json.loads(out.read_text())
    return {"runs": runs, "errors": errors, **found}


def show(name: str, got: dict[str, Any], top: int) -> None:
    runs = got["runs"]
    statements: Counter[str] = Counter(got["statements"])
    line = f"{name:>16}  runs {runs:4d}  errors {got['errors']}"
    if statements:
        line += f"  statements/run {sum(statements.values()) / runs:6.1f}"
    else:
        held = 1000 * got["held"] / max(got["takes"], 1)
        line += f"  write-lock takes/run {got['takes'] / runs:5.1f}  held ms/take {held:5.2f}"
        line += f"  held ms/run {1000 * got['held'] / runs:6.1f}"
    print(line)
    for text, n in statements.most_common(top):
        print(f"{'':>18}{n / runs:6.2f}  {text}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--runs-per-user", type=int, default=4)
    parser.add_argument("--before", type=Path, default=None)
    parser.add_argument("--top", type=int, default=12, help="statements shown per server")
    args = parser.parse_args()
    trees: list[tuple[str, Path | None]] = [("onward", None)]
    if args.before is not None:
        trees.append(("before", args.before))
    print("durability (read back):", pg_durability())
    for label, src in trees:
        print(f"  {label} SQLite: {sqlite_durability_of(src)}")
    port = 8790
    for label, src in trees:
        with tempfile.TemporaryDirectory() as tmp:
            got = count(
                f"{label} sqlite",
                f"sqlite:///{tmp}/o.db",
                port,
                src,
                args.users,
                args.runs_per_user,
            )
        show(f"{label} sqlite", got, args.top)
        with pg_schema() as url:
            got = count(f"{label} postgres", url, port + 1, src, args.users, args.runs_per_user)
        show(f"{label} postgres", got, args.top)
        port += 2
    sys.stdout.flush()


if __name__ == "__main__":
    main()
