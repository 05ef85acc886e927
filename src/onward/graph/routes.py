"""The route table: where each node may go next, and why — one source for routing and drawing.

Every conditional edge of the graph is built from :data:`EXITS` (a node's possible next
nodes) and labelled by :func:`label` (why a run takes it). The scheduler (graph/schedule.py)
routes failed steps by :data:`FAILURE_ROUTES`, the same table the labels are drawn from, and
:func:`check_exit` refuses a route a node has not declared, so the drawing cannot lie:
``tests/cli/test_graph_routes.py`` checks that every transition in the runs' checkpoint
histories is a drawn edge, and tests/unit/test_graph_edges.py takes the edges the rest of the
suite does not, so that every drawn edge is taken.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from enum import StrEnum

from langgraph.graph import END

from onward.errors import IllegalRouteError
from onward.model.state import FailureClass


class Node(StrEnum):
    """The graph's nodes (their names are stored in checkpoints: never rename one)."""

    PLAN = "plan"
    GATE = "gate"
    """Joins a parallel wave: runs once every task of the wave has committed."""
    APPROVE = "approve"
    EXECUTE = "execute"
    VERIFY = "verify"
    ESCALATE = "escalate"
    NOTE = "note"
    RETRY = "retry"
    REPLAN = "replan"
    WAIT = "wait"
    FINALIZE = "finalize"


Target = Node | str
"""A node, or LangGraph's ``END``."""

FAILURE_ROUTES: Mapping[FailureClass, tuple[Node, ...]] = {
    FailureClass.TRANSIENT: (Node.RETRY,),
    FailureClass.DETERMINISTIC: (Node.REPLAN, Node.ESCALATE),
    FailureClass.VALIDATION: (Node.REPLAN, Node.ESCALATE),
    FailureClass.NON_CONVERGENT: (Node.ESCALATE,),
}
"""Where a failed step goes, by its class, first choice first: replan only when a rule or a
model can fix the step, else a person; a person only when the policy lets the run ask one
(``--no-escalate`` sends the run to finalize, failed). The replan node, which revises plans,
also expands a milestone that is due (:data:`MILESTONE_DUE`), once no failure is open."""
MILESTONE_DUE = "milestone due"
"""Why a run goes to replan without a failure: a milestone's dependencies are done, and the
model expands it into steps (onward.planning.milestones)."""

TASK_NODES = frozenset({Node.APPROVE, Node.EXECUTE, Node.ESCALATE, Node.NOTE})
"""Nodes fed by ``Send`` (one task per step or question)."""

_SCHEDULED: tuple[Target, ...] = (
    Node.APPROVE,
    Node.EXECUTE,
    Node.ESCALATE,
    Node.NOTE,
    Node.RETRY,
    Node.REPLAN,
    Node.WAIT,
    Node.FINALIZE,
)
"""Everything the scheduler can pick when failures are possible."""
_SCHEDULED_AFTER_FIX = tuple(t for t in _SCHEDULED if t != Node.RETRY)
"""The same, after a node that leaves no transient failure open."""
_RUNNABLE: tuple[Target, ...] = (Node.APPROVE, Node.EXECUTE, Node.NOTE, Node.WAIT)
"""Ready work (and its questions and warnings), or only steps deferred to a time."""

EXITS: Mapping[Node, tuple[Target, ...]] = {
    # A fresh plan has no failures and no one waiting; it may need approval or a warning.
    Node.PLAN: (Node.APPROVE, Node.EXECUTE, Node.NOTE, Node.WAIT, Node.FINALIZE),
    # A lone step goes straight to verify; a step in a wave joins its siblings first.
    Node.EXECUTE: (Node.VERIFY, Node.GATE),
    # After a wave: verify what it produced, else schedule. END: an edit of a suspended
    # run's state lands as gate (update_state), and the run stays suspended.
    Node.GATE: (Node.VERIFY, *_SCHEDULED, END),
    Node.VERIFY: _SCHEDULED,
    # An answer creates no transient failure, and none is open when a person is asked.
    # verify: an output the judge could not review is reviewed again, or passed without.
    Node.APPROVE: (Node.VERIFY, *_SCHEDULED_AFTER_FIX, Node.GATE),
    # A person's result ("I did it") is verified like a tool's output. No escalation
    # follows one: all of a superstep's questions for people go out together, and nothing
    # runs while they wait.
    Node.ESCALATE: (Node.VERIFY, *(t for t in _SCHEDULED if t != Node.ESCALATE), Node.GATE),
    # Warnings only ever go out beside other tasks.
    Node.NOTE: (Node.GATE,),
    # The retried steps are pending again: ready or in backoff. Failures for a person were
    # asked before the retry, so only a fixable one can be left (replan).
    Node.RETRY: (*_RUNNABLE, Node.REPLAN),
    # Replan runs only when no transient failure is open (retry goes first); it expands a
    # milestone only when no failure is open at all. Never after plan (a milestone waits
    # for a step) or a wait (a due milestone is expanded before anything waits).
    Node.REPLAN: _SCHEDULED_AFTER_FIX,
    # Waiting in process, or suspended until a time (the run ends; resume goes on). A wait
    # is scheduled only when nothing failed and nothing is ready, and a wait changes
    # nothing but the clock: after it, the deferred steps are ready or still deferred.
    Node.WAIT: (*_RUNNABLE, END),
    # The run ends, unless the goal's review could not run and a person is asked.
    Node.FINALIZE: (Node.APPROVE, END),
}
"""Each node's possible next nodes: its conditional edges, no more."""

EDITED: frozenset[tuple[str, str]] = frozenset({(Node.GATE.value, END)})
"""Edges only an edit takes (``update_state(as_node=...)``): they are drawn, but a
checkpoint history does not show them as transitions (the server-recovery test of a
suspended run takes gate → END through one)."""

_WHY: Mapping[Target, str] = {
    Node.EXECUTE: "ready steps",
    Node.APPROVE: "approval, plan, budget or review question",
    Node.NOTE: "budget warning",
    Node.WAIT: "only deferred steps",
    Node.FINALIZE: "nothing left to run",
    Node.VERIFY: "output produced",
    Node.GATE: "joins a parallel wave",
    END: "suspended until a time",
}


def _failure_label(target: Node) -> str:
    classes = [c.value for c, routes in FAILURE_ROUTES.items() if target in routes]
    return " / ".join(classes)


def label(source: Node, target: Target) -> str:
    """Why a run goes from ``source`` to ``target`` (LangGraph draws one label per pair)."""
    if target == Node.REPLAN:
        return f"{_failure_label(Node.REPLAN)} / {MILESTONE_DUE}"
    if target == Node.RETRY:
        return _failure_label(Node(target))
    if target == Node.ESCALATE:
        return "outcome unknown / " + _failure_label(Node.ESCALATE)
    if target == Node.FINALIZE and source in (Node.VERIFY, Node.GATE):
        return "ok: nothing left, or a failure no one may be asked about"
    if source == Node.FINALIZE:
        return "run finished" if target == END else "the goal's review could not run"
    if target == Node.VERIFY and source == Node.APPROVE:
        return "review again, or pass without it"
    why = _WHY[target]
    return f"ok: {why}" if source == Node.VERIFY else why


def path_map(source: Node) -> dict[Hashable, str]:
    """The labelled conditional edges of ``source``: label → next node."""
    return {label(source, t): str(t) for t in EXITS[source]}


def check_exit(source: Node, target: Target) -> str:
    """``target``'s label, if ``source`` declares that exit; else a bug in onward."""
    if target not in EXITS[source]:
        raise IllegalRouteError(f"{source} routed to {target}, an exit it does not declare")
    return label(source, target)


def drawn_edges() -> frozenset[tuple[str, str]]:
    """Every (source, target) pair the compiled graph draws (START → plan included)."""
    from langgraph.graph import START

    edges = {(START, str(Node.PLAN))}
    edges.update((str(s), str(t)) for s, targets in EXITS.items() for t in targets)
    return frozenset(edges)
