"""onward.observe.reading: the one entry for reading a run, lightest exact read first.

It answers what the full read (``Onward.get`` / ``Onward.inbox``) answers, and says None
where every light read gives up, so the caller goes through LangGraph.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest

from onward import Onward, Plan, PlanStep, RunPolicy
from onward.errors import FullRead
from onward.observe import latest, plain, questions, reading
from onward.store.tables import Tables


def _refuse(*args: object, **kwargs: object) -> NoReturn:
    raise FullRead("this test makes every light read give up")


def _two_steps() -> Plan:
    return Plan(
        steps=[PlanStep(id="a", tool="noop"), PlanStep(id="b", tool="noop", depends_on=["a"])]
    )


def test_a_finished_run_reads_as_the_full_read_does(ow: Onward, db_url: str, workdir: Path) -> None:
    full = ow.run(plan=_two_steps(), workdir=workdir)
    with Tables.open(db_url) as tables:
        shown = reading.plain_view(tables, full.thread_id)
        viewed = reading.view(tables, full.thread_id)
    assert shown is not None
    assert viewed is not None
    assert viewed.status == full.status
    assert [s.status for s in viewed.steps] == [s.status for s in full.steps]
    assert shown.status.value == full.status.value


def test_the_inbox_reads_a_waiting_runs_question(ow: Onward, db_url: str, workdir: Path) -> None:
    policy = RunPolicy(approve_plan=True)
    waiting = ow.run(plan=_two_steps(), workdir=workdir, policy=policy)
    with Tables.open(db_url) as tables:
        asked = reading.inbox(tables, tables.unfinished_runs())
        assert reading.inbox(tables, []) == []
    assert asked is not None
    assert [q.thread_id for q in asked] == [waiting.thread_id]
    assert [q.kind.value for q in asked] == [p.kind.value for p in ow.inbox()]


def test_where_every_light_read_gives_up_the_answer_is_none(
    ow: Onward, db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = ow.run(plan=_two_steps(), workdir=workdir, policy=RunPolicy(approve_plan=True))
    for module, name in ((plain, "latest_checkpoint"), (latest, "latest_checkpoint")):
        monkeypatch.setattr(module, name, _refuse)
    for module in (questions, latest):
        monkeypatch.setattr(module, "latest_id", _refuse)
    with Tables.open(db_url) as tables:
        assert reading.plain_view(tables, done.thread_id) is None
        assert reading.view(tables, done.thread_id) is None
        assert reading.inbox(tables, tables.unfinished_runs()) is None


def test_a_runs_questions_are_read_without_its_checkpoints_values(
    ow: Onward, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Onward.pending`` (a served follow-up asks it first) reads the newest checkpoint's
    id and its pending writes: a long run's values are not loaded to find its question."""
    from onward.client import views

    waiting = ow.run(plan=_two_steps(), workdir=workdir, policy=RunPolicy(approve_plan=True))
    asked = ow.pending(waiting.thread_id)

    def loaded(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("the checkpoint's values were loaded")

    monkeypatch.setattr(latest, "latest_checkpoint", loaded)
    monkeypatch.setattr(views, "snapshot", loaded)
    again = ow.pending(waiting.thread_id)
    assert [q.interrupt_id for q in again] == [q.interrupt_id for q in asked]
    assert [q.kind for q in again] == [q.kind for q in asked] != []


def test_the_newest_checkpoint_is_named_without_loading_it(
    ow: Onward, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = ow.run(plan=_two_steps(), workdir=workdir)
    newest = ow.graph.get_state(ow._config(done.thread_id)).config["configurable"]["checkpoint_id"]

    def loaded(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("the checkpoint was loaded")

    monkeypatch.setattr(ow.graph.checkpointer, "get_tuple", loaded)
    # what a served follow-up's run record names as the checkpoint it starts from
    assert reading.newest_checkpoint(ow, done.thread_id) == newest
    assert reading.newest_checkpoint(ow, "no-such-thread") is None
