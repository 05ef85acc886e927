"""The graph: START → plan → gate ⇉ approve | execute (tool + verify) | escalate → gate …
→ finalize → END.

``gate`` is a routing function after a lone task (one superstep, one checkpoint
per step) and a join node after a parallel wave (see graph/routing.py). approve
and escalate wait for a person with ``interrupt()`` (see nodes/approve.py).
"""

from __future__ import annotations

import inspect
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import get_runtime

from onward.artifacts import ARTIFACT_REFS
from onward.errors import DrainRequested
from onward.graph.routing import (
    APPROVE,
    ESCALATE,
    EXECUTE,
    FINALIZE,
    GATE,
    NOTE,
    REPLAN,
    RETRY,
    ROUTES,
    STATE_NODES,
    TASK_NODES,
    WAIT,
    join,
    make_after_task,
    make_gate,
)
from onward.nodes.approve import make_approve_node, make_escalate_node
from onward.nodes.deps import NodeDeps
from onward.nodes.execute import make_execute_node
from onward.nodes.finalize import make_finalize_node
from onward.nodes.note import make_note_node
from onward.nodes.plan import make_plan_node
from onward.nodes.recover import make_replan_node, make_retry_node, make_wait_node
from onward.progress import EVENT_ROWS
from onward.state import RunState


def logged(deps: NodeDeps, fn: Any) -> Any:
    """Log the events a node emits with its writes: the saver inserts them in the
    transaction that saves the node's writes (``deps.held``), so a step's events are in
    the log exactly when its result is in the checkpoint. Without a saver, the node
    writes them itself before its writes commit (a node killed before them runs again,
    and the dedupe keys keep the log single)."""
    takes_config = len(inspect.signature(fn).parameters) > 1

    def node(arg: Any, config: RunnableConfig) -> Any:
        if deps.draining.is_set():
            raise DrainRequested(getattr(fn, "__name__", "node"))
        with EVENT_ROWS.collecting() as rows, ARTIFACT_REFS.collecting() as refs:
            try:
                return fn(arg, config) if takes_config else fn(arg)
            finally:
                if (rows or refs) and deps.events is not None:
                    conf = config.get("configurable", {})
                    thread_id = str(conf.get("thread_id", ""))
                    task_id = _task_id() if deps.held is not None else None
                    if deps.held is not None and task_id:
                        deps.held.hold(thread_id, task_id, rows, refs)
                    else:
                        deps.events.record_many(thread_id, rows, artifact_refs=refs)

    node.__name__ = getattr(fn, "__name__", "node")
    return node


def _task_id() -> str | None:
    """The running task's id (the saver's key for its writes)."""
    try:
        info = get_runtime().execution_info
    except RuntimeError:
        return None
    return info.task_id if info is not None else None


def build_graph(deps: NodeDeps) -> StateGraph[Any]:
    """The uncompiled builder (``langgraph dev`` and tests compile it their own way)."""
    g: StateGraph[Any] = StateGraph(RunState)

    def add(name: str, fn: Any) -> None:
        g.add_node(name, logged(deps, fn))

    gate = make_gate(deps)
    after_task = make_after_task(gate)
    add("plan", make_plan_node(deps))
    add(APPROVE, make_approve_node(deps))
    add(EXECUTE, make_execute_node(deps))
    add(ESCALATE, make_escalate_node(deps))
    add(NOTE, make_note_node(deps))
    add(RETRY, make_retry_node(deps))
    add(REPLAN, make_replan_node(deps))
    add(WAIT, make_wait_node(deps))
    g.add_node(GATE, join)
    add(FINALIZE, make_finalize_node(deps))
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", gate, ROUTES)
    for node in TASK_NODES:
        g.add_conditional_edges(node, after_task, [*ROUTES, GATE])
    for node in [*STATE_NODES, GATE]:
        g.add_conditional_edges(node, gate, ROUTES)
    g.add_edge(FINALIZE, END)
    return g


def compile_graph(
    deps: NodeDeps, checkpointer: BaseCheckpointSaver[Any] | None = None
) -> CompiledStateGraph[Any, Any, Any, Any]:
    return build_graph(deps).compile(checkpointer=checkpointer)


def mermaid() -> str:
    """The graph as a Mermaid diagram (the README's copy is checked against this)."""
    import tempfile
    from pathlib import Path

    from onward.artifacts import ArtifactStore
    from onward.tools.registry import default_registry

    deps = NodeDeps(registry=default_registry, artifacts=ArtifactStore(Path(tempfile.gettempdir())))
    return compile_graph(deps).get_graph().draw_mermaid()
