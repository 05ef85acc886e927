"""``onward serve`` on Postgres holds a bounded number of connections, whatever the number
of users: every request and drive borrows from the process's one pool
(``ONWARD_PG_POOL_SIZE``), counted here in ``pg_stat_activity`` by the server's
``application_name`` while 20 ``langgraph_sdk`` users run at once."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
from langgraph_sdk import get_sync_client

from tests.support.common import PG_URL, postgres_schema
from tests.support.serve import start_server
from tests.support.serve_long import noop_chain

POOL = 4
USERS = 20


class Peak:
    """The most connections an application name held, sampled until stopped."""

    def __init__(self, app: str) -> None:
        self.app, self.most, self._stop = app, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def now(self) -> int:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (self.app,)
            ).fetchone()
        return int(row[0]) if row else 0

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.most = max(self.most, self.now())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.most


def user(url: str) -> list[str]:
    """Two runs, each on a new thread: their final statuses."""
    client = get_sync_client(url=url, api_key=None)
    out = []
    for _ in range(2):
        thread_id = client.threads.create()["thread_id"]
        final: Any = client.runs.wait(thread_id, "onward", input=noop_chain(3))
        out.append(final["status"])
    return out


def test_twenty_users_share_the_servers_bounded_pool(workdir: Path) -> None:
    app = f"onward-serve-{uuid.uuid4().hex[:8]}"
    with postgres_schema() as db:
        proc, url = start_server(
            db,
            workdir,
            ONWARD_PG_POOL_SIZE=str(POOL),
            ONWARD_RUN_SLOTS=str(USERS),  # a slot for every user: far more than the pool
            ONWARD_USER_RUNS=str(USERS),  # the users share one name (no tokens)
            PGAPPNAME=app,
        )
        peak = Peak(app)
        try:
            with ThreadPoolExecutor(USERS) as users:
                statuses = list(users.map(user, [url] * USERS))
            most = peak.stop()
            after = peak.now()
        finally:
            proc.terminate()
            proc.wait(30)
    assert statuses == [["done", "done"]] * USERS
    assert 0 < most <= POOL, most
    assert after <= POOL
