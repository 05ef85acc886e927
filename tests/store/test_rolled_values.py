"""A thread's state read through the values the savers keep (checkpointing/values.py) is
the state LangGraph rebuilds from the deltas: at every checkpoint of a run, and after a
write at an old checkpoint; and a page of history reads a bounded number of stored rows
however long the thread is."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig

from onward import Onward
from onward.checkpointing.values import CheckpointValues
from onward.graph.schedule import GATE
from onward.model.state import StepRecord, StepStatus
from onward.serve.wire import thread_state
from tests.support.rolled_values import run


def page(ow: Onward, thread_id: str, limit: int | None = None) -> list[str]:
    """Each state of the thread's history, newest first, as the server sends it."""
    snaps = ow.graph.get_state_history(ow._config(thread_id), limit=limit)
    return [json.dumps(thread_state(s), sort_keys=True) for s in snaps]


@contextmanager
def langgraphs_way(ow: Onward) -> Iterator[None]:
    """Reads rebuild every value from the deltas, as LangGraph does (nothing kept, no
    channel known to roll)."""
    saver = ow.store.saver
    kept, saver.values = saver.values, CheckpointValues()
    try:
        yield
    finally:
        saver.values = kept


def forget_kept(ow: Onward) -> None:
    """As in a process that has read nothing yet."""
    ow.store.saver.values = CheckpointValues()
    ow.store.saver.learn_channels(ow.graph.channels)


class Reads:
    """Counts what the saver reads from the store to rebuild values: write rows (rolled
    forward, or replayed LangGraph's way) and rebuilds LangGraph's way."""

    def __init__(self, ow: Onward) -> None:
        self.saver = ow.store.saver
        self.rolled_rows = 0
        self.replayed_rows = 0
        self.rebuilds = 0
        self._writes_at, self._full = self.saver.writes_at, self.saver.full_history
        self.saver.writes_at = self.writes_at
        self.saver.full_history = self.full_history

    def writes_at(self, *args: Any) -> Any:
        rows = self._writes_at(*args)
        self.rolled_rows += len(rows)
        return rows

    def full_history(self, config: RunnableConfig, channels: Sequence[str]) -> Any:
        found = self._full(config, channels)
        self.rebuilds += 1
        self.replayed_rows += sum(len(h["writes"]) for h in found.values())
        return found

    def close(self) -> None:
        del self.saver.writes_at, self.saver.full_history


def test_every_checkpoint_of_a_run_reads_as_langgraph_rebuilds_it(
    db_url: str, workdir: Path
) -> None:
    with Onward(db_url) as ow:
        thread_id = run(ow, 40)
        rolled = page(ow, thread_id)
        again = page(ow, thread_id)  # now from values kept by the first read
        with langgraphs_way(ow):
            rebuilt = page(ow, thread_id)
    assert len(rebuilt) > 80  # about two checkpoints a step
    assert rolled == rebuilt
    assert again == rebuilt


def test_a_write_at_an_old_checkpoint_changes_what_its_descendants_read(
    db_url: str, workdir: Path
) -> None:
    with Onward(db_url) as ow:
        thread_id = run(ow, 12)
        before = page(ow, thread_id)  # every value kept
        history = list(ow.store.saver.list(ow._config(thread_id)))
        old = history[len(history) // 2].config
        note = StepRecord(id="s0", status=StepStatus.DONE, note="written later")
        ow.store.saver.put_writes(old, [("steps", {"s0": note})], task_id="late-write")
        after = page(ow, thread_id)
        with langgraphs_way(ow):
            rebuilt = page(ow, thread_id)
    assert after == rebuilt
    assert after != before
    assert sum("written later" in s for s in after) == len(history) // 2


def test_a_history_page_reads_as_many_rows_on_a_long_thread_as_on_a_short_one(
    db_url: str, workdir: Path
) -> None:
    got: dict[int, dict[str, int]] = {}
    with Onward(db_url) as ow:
        for n in (20, 120):
            thread_id = run(ow, n)
            forget_kept(ow)
            reads = Reads(ow)
            cold = page(ow, thread_id, limit=10)
            counts = {"cold_rebuilds": reads.rebuilds, "cold_rolled": reads.rolled_rows}
            reads.rebuilds = reads.rolled_rows = reads.replayed_rows = 0
            ow.graph.get_state(ow._config(thread_id))
            warm = page(ow, thread_id, limit=10)
            counts |= {
                "warm_rebuilds": reads.rebuilds,
                "warm_rows": reads.rolled_rows + reads.replayed_rows,
            }
            reads.close()
            assert warm == cold
            assert len(cold) == 10
            got[n] = counts
    # One rebuild for a cold page (the value 16 checkpoints back), then the writes of
    # those 16 checkpoints, whatever the thread's length; a warm page reads none.
    assert got[20] == got[120]
    assert got[120]["cold_rebuilds"] == 1
    assert 0 < got[120]["cold_rolled"] <= 16 * 4
    assert got[120]["warm_rebuilds"] == 0
    assert got[120]["warm_rows"] == 0


def test_a_branch_forked_from_an_old_checkpoint_reads_as_langgraph_rebuilds_it(
    db_url: str, workdir: Path
) -> None:
    """A fork's head stores its values (they are not its parent's plus the writes saved
    there): the checkpoints after it are never rolled from before it."""
    with Onward(db_url) as ow:
        thread_id = run(ow, 6)
        page(ow, thread_id)  # every value of the first branch kept
        history = list(ow.store.saver.list(ow._config(thread_id)))
        old = history[len(history) // 2].config
        head = ow.graph.update_state(
            old, {"messages": [HumanMessage("a fork", id="fork")]}, as_node=GATE
        )
        ow.graph.invoke(None, {**ow._config(thread_id), **head})
        forked = page(ow, thread_id)
        with langgraphs_way(ow):
            rebuilt = page(ow, thread_id)
    assert forked == rebuilt
    assert '"a fork"' in forked[0]
