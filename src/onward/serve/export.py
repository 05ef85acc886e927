"""onward's graph for ``langgraph dev`` / LangGraph Server (see ``langgraph.json``).

That server brings its own checkpointer, so the graph is compiled without one. Its
nodes still use an onward store ($ONWARD_DB, default ``sqlite:///.onward/onward.db``)
for what the checkpointer does not hold: the effect ledger (side effects once), the
event log, artifact bodies and breakers. Tools come from $ONWARD_TOOLS. The input is a
:class:`~onward.model.state.RunState` as JSON, e.g. ``{"goal": {"objective": "..."},
"plan": {"steps": [...]}, "workdir": "/path"}``.

The server's serializer is LangGraph's, not onward's: under ``LANGGRAPH_STRICT_MSGPACK``
it reads back only the types on the graph's allowlist, which LangGraph collects from the
state schema when the graph is compiled. That misses the types only nodes write (the
``Send`` tasks, step records, checks...), and the server's ``graph.copy()`` (how it
attaches its checkpointer) drops the allowlist altogether, so a resumed run got its
tasks back as plain dicts. :class:`HostedGraph` carries every onward checkpoint type
(:func:`~onward.checkpointing.serde.checkpoint_types`) through those copies.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph.state import CompiledStateGraph

from onward.checkpointing.serde import checkpoint_types, core_message_allowlist
from onward.graph.build import build_graph
from onward.llm.models import check_model, model_from_env
from onward.nodes.deps import NodeDeps
from onward.store.database import Store, default_url
from onward.tools.registry import default_registry, load_tool_modules, tool_modules_from_env


def allowlist() -> set[tuple[str, ...]]:
    """(module, class) of every type onward's graph puts into a checkpoint, plus the
    LangChain messages LangGraph always allows: what ``langgraph.json`` lists too."""
    own = {(t.__module__, t.__name__) for t in checkpoint_types()}
    return own | core_message_allowlist()


class HostedGraph(CompiledStateGraph):  # type: ignore[type-arg]
    """The compiled graph, keeping its serializer allowlist through ``copy``."""

    def copy(self, update: dict[str, Any] | None = None) -> Any:
        new = super().copy(update)
        new._serde_allowlist = self._serde_allowlist
        return new


def make_graph(db: str | None = None) -> HostedGraph:
    load_tool_modules(tool_modules_from_env())
    store = Store(db or default_url())
    deps = NodeDeps(
        registry=default_registry,
        artifacts=store.artifacts,
        ledger=store.ledger,
        events=store.events,
        breakers=store.breakers,
        model=check_model(model_from_env()),
    )
    compiled = build_graph(deps, hosted=True).compile()
    graph = HostedGraph(**{k: v for k, v in compiled.__dict__.items() if k != "__orig_class__"})
    graph._serde_allowlist = (compiled._serde_allowlist or set()) | allowlist()
    return graph


graph = make_graph()
