"""The graph: START → plan → (scheduler) ⇉ approve | execute → verify | escalate … → finalize
→ END, with its edges drawn from the route table (graph/routes.py).

Every node leaves by one conditional edge whose path map is the route table's labelled
exits; its router is the scheduler's (graph/schedule.py): it schedules after a lone task
and after the ``gate`` join node that follows a parallel wave. execute saves an output as produced;
verify makes it done or routes its failure by class. approve and escalate wait for a
person with ``interrupt()`` (nodes/asking.py).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable
from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime, get_runtime

from onward.checkpointing.savers import FlushedReads
from onward.errors import DrainRequested
from onward.graph.routes import EXITS, Node, label, path_map
from onward.graph.schedule import Scheduler, join, routed_execute
from onward.model.state import RunState
from onward.nodes.approve import approve
from onward.nodes.deps import NodeDeps, thread_of
from onward.nodes.escalate import escalate
from onward.nodes.finalize import finalize
from onward.nodes.note import note
from onward.nodes.plan import plan
from onward.nodes.replan import replan
from onward.nodes.retry import retry
from onward.nodes.wait import wait
from onward.observe.progress import EVENT_ROWS
from onward.store.artifacts import ARTIFACT_REFS


def _always(_state: RunState) -> bool:
    return True


def _declared_plan(state: RunState) -> bool:
    """Plan re-validates a plan the run was given (no model, no template's files)."""
    return bool(state.plan.steps)


def _no_goal_review(state: RunState) -> bool:
    """Finalize reads the saved steps and runs the acceptance checks (no judge model)."""
    return state.goal is None or not state.goal.judge


REPRODUCIBLE: dict[Node, Callable[[RunState], bool]] = {
    Node.VERIFY: _always,
    Node.GATE: _always,
    Node.PLAN: _declared_plan,
    Node.FINALIZE: _no_goal_review,
}
"""Nodes whose writes may wait for the next commit when their input says so: run again,
they write the same (checkpointing/savers.py, "one durable commit per plan step"). A plan
the model makes, or a goal review by a judge, costs a model call: their writes commit at
once, so a crash does not lose them."""


ROUTES_ITSELF = frozenset({Node.EXECUTE, Node.VERIFY})
"""Nodes that pick their exit themselves (``Command``, graph/schedule.py) with the route
table's exits and labels: a conditional edge reads a fresh copy of every channel, and
their next nodes need none (execute's follows from its task, verify's from its input and
its own writes). Their routes are the scheduler's all the same
(``Scheduler.verify_node``); what a conditional edge would cost them: docs/benchmarks.md."""


class Logged:
    """A node that logs the events it emits with its writes: the saver inserts them in the
    transaction that saves the node's writes (``deps.held``), so a step's events are in
    the log exactly when its result is in the checkpoint. Without a saver, the node
    writes them itself before its writes commit (a node killed before them runs again,
    and the dedupe keys keep the log single).

    The node's dependencies come from LangGraph's run context (``Runtime[NodeDeps]``, the
    ``context=`` onward passes to every drive); ``default`` serves a host that runs the
    graph without onward's context (``langgraph dev``, LangGraph Studio).

    A callable object rather than a closure: LangGraph's compile looks through a node
    function's closure and globals for subgraphs (disassembling its bytecode, half of
    compiling onward's graph), and an object has none to look through."""

    def __init__(
        self,
        default: NodeDeps,
        fn: Any,
        *,
        reproducible: Callable[[Any], bool] | None = None,
        checks: bool = False,
    ) -> None:
        self.default, self.fn = default, fn
        self.reproducible, self.checks = reproducible, checks
        self.wants = set(inspect.signature(fn).parameters)
        self.__name__ = getattr(fn, "__name__", "node")

    def __call__(self, arg: Any, config: RunnableConfig, runtime: Runtime[NodeDeps]) -> Any:
        if not isinstance(runtime.context, NodeDeps):  # a host without onward's context
            runtime = runtime.override(context=self.default)
        deps = runtime.context
        if deps.draining.is_set() and not (self.checks and deps.cancelling.is_set()):
            raise DrainRequested(self.__name__)
        thread_id = thread_of(config)
        task_id = _task_id() if deps.held is not None else None
        if deps.held is not None and task_id and self.reproducible and self.reproducible(arg):
            deps.held.mark_reproducible(thread_id, task_id)
        given = {"config": config, "runtime": runtime}
        kwargs = {k: v for k, v in given.items() if k in self.wants}
        with EVENT_ROWS.collecting() as rows, ARTIFACT_REFS.collecting() as refs:
            try:
                return self.fn(arg, **kwargs)
            finally:
                if (rows or refs) and deps.events is not None:
                    if deps.held is not None and task_id:
                        deps.held.hold(thread_id, task_id, rows, refs)
                    else:
                        deps.events.record_many(thread_id, rows, artifact_refs=refs)


def _task_id() -> str | None:
    """The running task's id (the saver's key for its writes)."""
    try:
        info = get_runtime().execution_info
    except RuntimeError:
        return None
    return info.task_id if info is not None else None


def build_graph(deps: NodeDeps, *, hosted: bool = False) -> StateGraph[Any, NodeDeps]:
    """The uncompiled builder (``langgraph dev`` and tests compile it their own way).

    Its edges come from the route table (graph/routes.py): each node's conditional edge
    has exactly the exits the node declares, labelled with why a run takes them."""
    # Hosted (``langgraph dev``): no context schema, so the server neither builds nor
    # validates a context it cannot give; the nodes then run on ``deps``.
    g: StateGraph[Any, NodeDeps] = StateGraph(RunState, context_schema=None if hosted else NodeDeps)
    scheduler = Scheduler(deps)
    nodes = {
        Node.PLAN: plan,
        Node.APPROVE: approve,
        Node.EXECUTE: routed_execute,
        Node.VERIFY: scheduler.verify_node(),
        Node.ESCALATE: escalate,
        Node.NOTE: note,
        Node.RETRY: retry,
        Node.REPLAN: replan,
        Node.WAIT: wait,
        Node.FINALIZE: finalize,
    }
    for name, fn in nodes.items():
        # Any: LangGraph types a node by its function's parameters, an object by none.
        node: Any = Logged(
            deps, fn, reproducible=REPRODUCIBLE.get(name), checks=name is Node.VERIFY
        )
        exits = {str(t): label(name, t) for t in EXITS[name]} if name in ROUTES_ITSELF else None
        g.add_node(name.value, node, destinations=exits)
    gate: Any = Logged(deps, join, reproducible=REPRODUCIBLE[Node.GATE])
    g.add_node(Node.GATE.value, gate)
    g.add_edge(START, Node.PLAN.value)
    for source in EXITS:
        if source in ROUTES_ITSELF:
            continue
        g.add_conditional_edges(source.value, scheduler.router(source), path_map(source))
    return g


def compile_graph(
    deps: NodeDeps, checkpointer: BaseCheckpointSaver[Any] | None = None
) -> CompiledStateGraph[Any, Any, Any, Any]:
    graph = build_graph(deps).compile(checkpointer=checkpointer)
    if isinstance(checkpointer, FlushedReads):  # its delta channels' values, rolled forward
        checkpointer.learn_channels(graph.channels)
    return graph


def mermaid() -> str:
    """The graph as a Mermaid diagram (the README's copy is checked against this)."""
    import tempfile
    from pathlib import Path

    from onward.store.artifacts import ArtifactStore
    from onward.tools.registry import default_registry

    deps = NodeDeps(registry=default_registry, artifacts=ArtifactStore(Path(tempfile.gettempdir())))
    return compile_graph(deps).get_graph().draw_mermaid()


class _Nothing(TypedDict):
    """The state of a graph that is only drawn."""


def _drawn_only(state: _Nothing) -> str:
    raise AssertionError("this graph is a drawing; it never runs")


def flow_mermaid() -> str:
    """How a step flows, for the README: the real graph with the scheduler drawn as one
    ``schedule`` node (it is a routing function after each node, so the real drawing
    repeats its exits on every node). Failure routes come from the same route table."""
    from onward.graph.routes import FAILURE_ROUTES, MILESTONE_DUE

    schedule = "schedule"
    never = _drawn_only
    g: StateGraph[Any] = StateGraph(_Nothing)
    for name in (Node.PLAN, schedule, Node.APPROVE, Node.EXECUTE, Node.VERIFY, Node.RETRY):
        g.add_node(str(name), lambda s: s)
    for name in (Node.REPLAN, Node.ESCALATE, Node.WAIT, Node.FINALIZE):
        g.add_node(str(name), lambda s: s)
    g.add_edge(START, Node.PLAN.value)
    g.add_edge(Node.PLAN.value, schedule)
    g.add_conditional_edges(
        schedule,
        never,
        {
            "needs approval": Node.APPROVE.value,
            "ready steps (fan-out)": Node.EXECUTE.value,
            "outcome unknown": Node.ESCALATE.value,
            MILESTONE_DUE: Node.REPLAN.value,
            "only deferred steps": Node.WAIT.value,
            "nothing left": Node.FINALIZE.value,
        },
    )
    g.add_edge(Node.EXECUTE.value, Node.VERIFY.value)
    targets = dict.fromkeys(t for ts in FAILURE_ROUTES.values() for t in ts)
    failures: dict[Hashable, str] = {
        " / ".join(c.value for c, ts in FAILURE_ROUTES.items() if t in ts): t.value for t in targets
    }
    g.add_conditional_edges(Node.VERIFY.value, never, {"ok": schedule, **failures})
    for name in (Node.APPROVE, Node.RETRY, Node.REPLAN, Node.ESCALATE):
        g.add_edge(name.value, schedule)
    g.add_conditional_edges(Node.WAIT.value, never, {"time is up": schedule, "suspended": END})
    g.add_edge(Node.FINALIZE.value, END)
    return g.compile().get_graph().draw_mermaid()
