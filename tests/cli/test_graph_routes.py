"""The drawn graph is the graph that runs, and the route table drives both.

The session-wide half lives in conftest.py: every transition any test's run took must be a
drawn edge, and a whole-suite run must take every drawn edge. Here: the drawing comes from
the route table, the four failure classes are readable on verify's edges, and each class
takes its route in a real run (read back from the run's checkpoint history).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.graph import END, START

from onward import Onward, Plan, PlanStep, RunPolicy
from onward.errors import IllegalRouteError
from onward.graph.build import compile_graph, flow_mermaid, mermaid
from onward.graph.routes import EDITED, EXITS, FAILURE_ROUTES, Node, drawn_edges, label
from onward.graph.schedule import routed
from onward.graph.trace import thread_transitions
from onward.model.state import FailureClass
from onward.verification.checks import Equals
from tests.support.paths import SUPPORT

TOOLS = str(SUPPORT / "failure_tools.py")


def _compiled_edges(ow: Onward) -> dict[tuple[str, str], str | None]:
    graph = ow.graph.get_graph()
    return {(e.source, e.target): e.data for e in graph.edges}


def test_the_drawing_is_the_route_table(ow: Onward) -> None:
    edges = _compiled_edges(ow)
    assert set(edges) == drawn_edges()
    for (source, target), data in edges.items():
        if source == START or (source, target) == (Node.FINALIZE, END):
            continue
        assert data == label(Node(source), target), (source, target)


def test_each_failure_class_is_readable_on_verifys_edges(ow: Onward) -> None:
    labels = [d or "" for (s, _), d in _compiled_edges(ow).items() if s == Node.VERIFY]
    for cls in FailureClass:
        assert any(cls.value in text.split(" / ") for text in labels), cls
    assert "transient" in labels
    for cls, targets in FAILURE_ROUTES.items():
        for target in targets:
            assert cls.value in label(Node.VERIFY, target).split(" / ")


def test_only_finalize_and_a_suspending_wait_can_end_a_run() -> None:
    enders = {s for s, targets in EXITS.items() if END in targets}
    # gate: an edit of a suspended run lands as gate, and the run stays suspended
    assert enders == {Node.FINALIZE, Node.WAIT, Node.GATE}
    assert {(str(Node.GATE), END)} == EDITED
    assert EXITS[Node.EXECUTE] == (Node.VERIFY, Node.GATE), "execute never decides done"


def test_a_route_a_node_did_not_declare_is_refused() -> None:
    with pytest.raises(IllegalRouteError, match="plan routed to retry"):
        routed(Node.PLAN, Node.RETRY.value)
    assert routed(Node.VERIFY, Node.RETRY.value) == "transient"


def test_onward_graph_draws_the_verify_node_and_labelled_failure_routes() -> None:
    drawing = mermaid()
    assert "verify(verify)" in drawing
    assert "execute -. &nbsp;output produced&nbsp; .-> verify;" in drawing
    assert "verify -. &nbsp;transient&nbsp; .-> retry;" in drawing
    assert "verify -. &nbsp;deterministic / validation / milestone due&nbsp; .-> replan;" in drawing


@pytest.fixture
def fow(db_url: str, workdir: Path) -> Iterator[Onward]:
    """A client whose registry has the failing test tools."""
    with Onward(db_url, tool_modules=[TOOLS]) as client:
        yield client


def _taken(ow: Onward, thread_id: str) -> set[tuple[str, str]]:
    return thread_transitions(ow.graph, thread_id)


def test_a_transient_failure_goes_from_verify_to_retry(fow: Onward, workdir: Path) -> None:
    plan = Plan(steps=[PlanStep(id="f", tool="flaky", args={"times": 1})])
    view = fow.run("flaky", plan=plan, workdir=workdir)
    assert view.status == "done"
    taken = _taken(fow, view.thread_id)
    assert {("execute", "verify"), ("verify", "retry")} <= taken
    # the next attempt: at once if its (jittered) backoff is over, else after a wait
    assert ("retry", "execute") in taken or {("retry", "wait"), ("wait", "execute")} <= taken


def test_a_check_that_fails_goes_from_verify_to_replan_when_a_rule_can_fix_it(
    fow: Onward, workdir: Path
) -> None:
    step = PlanStep(
        id="w", tool="wrong_output", args={"n": 2}, checks=[Equals(field="value", value=2)]
    )
    view = fow.run("wrong", plan=Plan(steps=[step]), workdir=workdir)
    assert view.status == "done"
    assert {("verify", "replan"), ("replan", "execute")} <= _taken(fow, view.thread_id)


def test_a_deterministic_failure_without_a_rule_goes_to_a_person(
    fow: Onward, workdir: Path
) -> None:
    plan = Plan(steps=[PlanStep(id="v", tool="always_value_error", args={"x": 1})])
    view = fow.run("fails", plan=plan, workdir=workdir)
    assert view.status == "waiting_for_human"
    assert ("verify", "escalate") in _taken(fow, view.thread_id)


def test_without_anyone_to_ask_a_failure_ends_the_run(fow: Onward, workdir: Path) -> None:
    plan = Plan(steps=[PlanStep(id="v", tool="always_value_error", args={"x": 1})])
    policy = RunPolicy(escalate_failures=False)
    view = fow.run("fails", plan=plan, workdir=workdir, policy=policy)
    assert view.status == "failed"
    assert {("verify", "finalize"), ("finalize", END)} <= _taken(fow, view.thread_id)


def test_drawn_edges_are_exactly_the_declared_exits() -> None:
    declared = {(str(s), str(t)) for s, targets in EXITS.items() for t in targets}
    assert drawn_edges() == declared | {(START, "plan")}
    graph = compile_graph.__module__  # the builder reads EXITS; nothing else adds edges
    assert graph == "onward.graph.build"


def test_onward_graph_prints_the_exact_graph_and_the_flow_view(run_cli: Any) -> None:
    exact = run_cli("graph", db=None)
    assert exact.code == 0
    assert exact.stdout == mermaid()
    flow = run_cli("graph", "--flow", db=None)
    assert flow.code == 0
    assert flow.stdout == flow_mermaid()
    assert "verify -. &nbsp;ok&nbsp; .-> schedule;" in flow.stdout
