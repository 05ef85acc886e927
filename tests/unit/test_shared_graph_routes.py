"""A graph compiled once serves every client that drives it (the server's pools share
one: ``Onward(graph_of=...)``): its routes decide on the driving run's own dependencies,
as its nodes do, not on those of the client that compiled it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from onward import Onward, Plan, PlanStep, RunPolicy

COMPILED_AT = datetime(2020, 1, 1, tzinfo=UTC)
DRIVEN_AT = datetime(2030, 6, 1, tzinfo=UTC)


def test_a_shared_graph_asks_its_question_on_the_driving_clients_clock(tmp_path: Path) -> None:
    db = tmp_path / "onward.db"
    plan = Plan(steps=[PlanStep(id="s0", tool="noop", args={"value": 1})])
    with Onward(db, model=None, clock=lambda: COMPILED_AT) as first:
        first.graph  # noqa: B018 - opens the store and compiles the graph
        with Onward(db, model=None, clock=lambda: DRIVEN_AT, graph_of=first) as driver:
            assert driver.graph is not first.graph
            view = driver.run(plan=plan, workdir=str(tmp_path), policy=RunPolicy(approve_plan=True))
            questions = driver.pending(view.thread_id)
    assert view.status == "waiting_for_human"
    assert [q.kind for q in questions] == ["plan"]
    assert questions[0].asked_at == DRIVEN_AT  # the plan question is the scheduler's
