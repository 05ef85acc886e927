"""onward's checkpoint savers.

A task's event rows commit in the same transaction as its checkpoint writes: the savers
take the rows a node left in ``Store.held`` and insert them with the task's writes; both
are saved, or neither is. Rows whose task never had its writes saved are dropped when the
drive ends; the task runs again and logs again.

On SQLite, a load finds each delta channel's snapshot by the distance its counters give,
and must return exactly what LangGraph's ancestor walk returns.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import pytest
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel, Field

from onward import Onward, Plan, PlanStep, RunStatus
from onward.checkpointing.savers import OnwardSqliteSaver, grouped
from onward.model.state import append_items
from onward.store.database import Store

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


# Loading a thread on SQLite: snapshots found by distance, the same as LangGraph's walk.


class _Counted(BaseModel):
    often: Annotated[list[int], DeltaChannel(append_items, list, snapshot_frequency=3)] = Field(
        default_factory=list
    )
    """Snapshotted every third update."""
    rarely: Annotated[list[int], DeltaChannel(append_items, list)] = Field(default_factory=list)
    """Written twice, never snapshotted: its history starts at the thread's root."""
    n: int = 0


def _counted_graph(saver: Any) -> Any:
    def tick(state: _Counted) -> dict[str, Any]:
        update: dict[str, Any] = {"often": [state.n], "n": state.n + 1}
        if state.n in (2, 9):
            update["rarely"] = [state.n]
        return update

    def more(state: _Counted) -> str:
        return "tick" if state.n < 14 else END

    graph = StateGraph(_Counted)
    graph.add_node("tick", tick)
    graph.add_edge(START, "tick")
    graph.add_conditional_edges("tick", more, ["tick", END])
    return graph.compile(checkpointer=saver)


def _histories(saver: Any, config: Any, channels: list[str], method: Any) -> list[Any]:
    result = method(saver, config=config, channels=channels)
    return [
        (ch, getattr(result[ch].get("seed"), "value", None), result[ch]["writes"])
        for ch in channels
    ]


def _counted_run(store: Store) -> tuple[OnwardSqliteSaver, Any, Any]:
    """The counted graph run to its end on the store's SQLite saver."""
    saver = store.saver
    assert isinstance(saver, OnwardSqliteSaver)
    graph = _counted_graph(saver)
    config: Any = {"configurable": {"thread_id": "t"}}
    graph.invoke({}, config, durability="sync")
    return saver, graph, config


def test_sqlite_loads_find_snapshots_by_distance_like_langgraphs_walk(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'o.db'}") as store:
        saver, graph, config = _counted_run(store)
        # A fork: an edit on a past checkpoint starts a branch of its own.
        past = list(graph.get_state_history(config))[8].config
        branch = graph.update_state(past, {"often": [100], "rarely": [200]})
        graph.invoke(None, branch, durability="sync")
        checked, by_distance = 0, 0
        for snap in graph.get_state_history(config):
            tup = saver.get_tuple(snap.config)
            assert tup is not None
            channels = [
                ch
                for ch in ("often", "rarely")
                if ch in tup.checkpoint["channel_versions"]
                and ch not in tup.checkpoint["channel_values"]
            ]
            if not channels:
                continue
            ours = _histories(
                saver, snap.config, channels, OnwardSqliteSaver.get_delta_channel_history
            )
            theirs = _histories(saver, snap.config, channels, SqliteSaver.get_delta_channel_history)
            assert ours == theirs
            checked += 1
            by_distance += saver._history_by_distance(snap.config, channels) is not None
        assert checked >= 15
        assert by_distance == checked  # no load fell back to the walk
        latest = graph.get_state(config).values  # the branch's end
        assert 100 in latest["often"]
        assert latest["rarely"] == [2, 200, 9]


def test_a_load_without_counters_falls_back_to_langgraphs_walk(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'o.db'}") as store:
        saver = store.saver
        graph = _counted_graph(saver)
        config: Any = {"configurable": {"thread_id": "t"}}
        graph.invoke({}, config, durability="sync")
        with store.db.use() as db:  # as an older LangGraph would have left them
            db.execute("UPDATE checkpoints SET metadata = '{}'")
        assert saver._history_by_distance(graph.get_state(config).config, ["often"]) is None
        assert graph.get_state(config).values["often"] == list(range(14))


def test_a_second_load_reuses_the_decoded_snapshots(tmp_path: Path) -> None:
    """A checkpoint never changes once written, so loading a thread again (a resume loads
    it three times) does not read the checkpoints holding its snapshots again."""
    with Store(f"sqlite:///{tmp_path / 'o.db'}") as store:
        saver, graph, config = _counted_run(store)
        seed_reads: list[str] = []
        saver.conn.set_trace_callback(
            lambda sql: (
                seed_reads.append(sql) if "type, checkpoint FROM checkpoints" in sql else None
            )
        )
        try:
            target = graph.get_state(config).config  # the first load reads them
            reads_first = len(seed_reads)
            first = _histories(
                saver, target, ["often", "rarely"], type(saver).get_delta_channel_history
            )
            again = _histories(
                saver, target, ["often", "rarely"], type(saver).get_delta_channel_history
            )
        finally:
            saver.conn.set_trace_callback(None)
        assert reads_first == 1
        assert len(seed_reads) == 1  # later loads read no snapshot checkpoint
        assert again == first


def test_a_batch_is_sent_grouped_by_statement_with_each_tables_rows_in_order() -> None:
    ins_a, ins_b = "INSERT INTO a (x) VALUES (?)", "INSERT INTO b (x) VALUES (?)"
    up_a = "INSERT INTO a (x) VALUES (?) ON CONFLICT (x) DO UPDATE SET x = excluded.x"
    batch = [
        (ins_a, [(1,)]),
        (ins_b, [(2,)]),
        (ins_a, [(3,)]),  # joins the first: only table b was written in between
        (up_a, [(4,)]),  # another statement on a: later rows of a may not pass it
        (ins_a, [(5,)]),
        (ins_b, [(6,)]),  # joins b's first: a's statements do not touch b
        ("VACUUM", []),  # a statement of unknown reach: nothing joins across it
        (ins_b, [(7,)]),
    ]
    assert grouped(batch) == [
        (ins_a, [(1,), (3,)]),
        (ins_b, [(2,), (6,)]),
        (up_a, [(4,)]),
        (ins_a, [(5,)]),
        ("VACUUM", []),
        (ins_b, [(7,)]),
    ]
    assert batch[0] == (ins_a, [(1,)])  # the saved statements are not changed
    flat = [(sql, row) for sql, rows in grouped(batch) for row in rows]
    assert sorted(flat, key=str) == sorted(
        [(sql, row) for sql, rows in batch for row in rows], key=str
    )
