"""A history page reads a bounded number of rows, however long the thread (issue 39).

``get_history(limit=k)`` is what chat UIs fetch whenever a thread is opened. The server
answers it from k checkpoints (one ``LIMIT k`` query and their pending writes), each
state rolled from the delta values the store keeps (checkpointing/values.py): the rows
SQLite visits for a page are counted here (its virtual machine's instructions, through a
progress handler on the saver's connection, and its statements) on a thread of 20 and of
80 steps, and are the same. A process that never saw the thread walks each delta channel
back to its last snapshot once: its statements are the same count, their rows are not.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from onward.policies.run import RunPolicy
from onward.serve.app import create_app
from tests.support.history_rows import thread_of

PAGE = 5


class Counted:
    """SQLite work on some connections: statements run and VM instructions stepped."""

    def __init__(self) -> None:
        self.statements = 0
        self.steps = 0

    def _step(self) -> int:
        self.steps += 1
        return 0

    def _statement(self, _sql: str) -> None:
        self.statements += 1

    @contextmanager
    def on(self, conns: list[sqlite3.Connection]) -> Iterator[Counted]:
        for conn in conns:
            conn.set_progress_handler(self._step, 1)
            conn.set_trace_callback(self._statement)
        try:
            yield self
        finally:
            for conn in conns:
                conn.set_progress_handler(None, 1)
                conn.set_trace_callback(None)


@pytest.fixture(autouse=True)
def no_cron_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's cron scheduler looks for due crons every tick, on the counted
    connections: a tick inside a measured page would count its statements too."""
    monkeypatch.setenv("ONWARD_CRON_TICK", "1h")


def page_cost(tmp: Path, steps: int, *, cold: bool) -> tuple[int, int, list[Any]]:
    """(statements, VM steps, page) of one history page of a ``steps``-step thread, read
    by the server that drove it, or (``cold``) as a server that never saw it."""
    app = create_app(
        f"sqlite:///{tmp / f'{steps}.db'}",
        workdir=tmp,
        model=None,
        recover=False,
        policy=RunPolicy(max_plan_steps=1000),
    )
    with TestClient(app) as client:
        thread_id = thread_of(client, steps)
        serving = app.state.serving
        made = serving.clients.made()
        if cold:
            for ow in made:
                ow.store.saver.values.forget(thread_id)
        with Counted().on([ow.store.saver.conn for ow in made]) as counted:
            page = client.post(f"/threads/{thread_id}/history", json={"limit": PAGE})
        assert page.status_code == 200, page.text
        assert [len(serving.clients.made())] == [len(made)]  # every read was counted
        return counted.statements, counted.steps, page.json()


def test_a_served_history_page_visits_as_many_sqlite_rows_on_a_long_thread_as_a_short_one(
    tmp_path: Path,
) -> None:
    short_statements, short_steps, short = page_cost(tmp_path, 20, cold=False)
    long_statements, long_steps, long = page_cost(tmp_path, 80, cold=False)
    assert len(short) == len(long) == PAGE
    assert len(long[0]["values"]["steps"]) == 80  # the whole state, as before
    assert long_statements == short_statements
    assert long_steps <= short_steps * 1.2  # four times the steps: a walk would be 4x


def test_a_server_that_never_saw_the_thread_runs_as_many_statements_for_a_page(
    tmp_path: Path,
) -> None:
    short_statements, _, short = page_cost(tmp_path, 20, cold=True)
    long_statements, _, long = page_cost(tmp_path, 80, cold=True)
    assert [s["checkpoint_id"] for s in long] != [s["checkpoint_id"] for s in short]
    assert long_statements == short_statements
