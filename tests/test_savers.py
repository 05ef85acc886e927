"""A task's event rows commit in the same transaction as its checkpoint writes.

The savers take the rows a node left in ``Store.held`` and insert them with the task's
writes: both are saved, or neither is. Rows whose task never had its writes saved are
dropped when the drive ends; the task runs again and logs again.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from onward import Onward, Plan, PlanStep, RunStatus
from onward.checkpointing.store import Store

CONFIG: Any = {"configurable": {"thread_id": "t1", "checkpoint_ns": "", "checkpoint_id": "c1"}}
ROW = (datetime(2026, 1, 1, tzinfo=UTC), "step_done", {"step_id": "s1"}, "step_done:s1:1")


def _writes(store: Store, task_id: str) -> list[Any]:
    with store.db.use() as db:
        table = "checkpoint_writes" if db.postgres else "writes"
        return db.execute(f"SELECT channel FROM {table} WHERE task_id = ?", (task_id,)).fetchall()


def test_writes_and_their_events_are_saved_together(db_url: str) -> None:
    with Store(db_url) as store:
        store.held.hold("t1", "task-ok", [ROW], [])
        store.saver.put_writes(CONFIG, [("steps", {"s1": 1})], "task-ok")

        assert [r[0] for r in _writes(store, "task-ok")] == ["steps"]
        assert [e.kind for e in store.events.list("t1")] == ["step_done"]
        assert store.held.drop_thread("t1") == 0  # taken by the saver


def test_a_failed_event_insert_saves_no_writes(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(db_url) as store:
        store.held.hold("t1", "task-bad", [ROW], [])
        monkeypatch.setattr(
            store.events,
            "statements",
            lambda *a, **k: [("INSERT INTO no_such_table VALUES (?)", [(1,)])],
        )
        with pytest.raises(Exception, match="no_such_table"):
            store.saver.put_writes(CONFIG, [("steps", {"s1": 1})], "task-bad")

        assert _writes(store, "task-bad") == []  # the task will run again, and log again
        monkeypatch.undo()
        store.saver.put_writes(CONFIG, [("steps", {"s1": 2})], "task-next")  # still usable
        assert [r[0] for r in _writes(store, "task-next")] == ["steps"]


def test_rows_no_saved_write_took_are_dropped_after_the_drive(db_url: str, workdir: Path) -> None:
    plan = Plan(steps=[PlanStep(id="only", tool="noop", args={"value": 1})])
    with Onward(db_url, model=None) as ow:
        tid = ow.start(plan=plan, workdir=workdir)
        # As if a task had ended without its writes being saved (e.g. Ctrl-C in a tool).
        ow.store.held.hold(tid, "a-task-never-saved", [ROW], [])
        assert ow.drive(tid).status is RunStatus.DONE

        assert ow.store.held.drop_thread(tid) == 0
        logged = [(e.kind, e.detail.get("step_id")) for e in ow.store.events.list(tid)]
        assert ("step_done", "only") in logged
        assert ("step_done", "s1") not in logged
