"""onward's graph for ``langgraph dev`` / LangGraph Server (see ``langgraph.json``).

That server brings its own checkpointer, so the graph is compiled without one. Its
nodes still use an onward store ($ONWARD_DB, default ``sqlite:///.onward/onward.db``)
for what the checkpointer does not hold: the effect ledger (side effects once), the
event log, artifact bodies and breakers. Tools come from $ONWARD_TOOLS. The input is a
:class:`~onward.model.state.RunState` as JSON, e.g. ``{"goal": {"objective": "..."},
"plan": {"steps": [...]}, "workdir": "/path"}``.
"""

from __future__ import annotations

from typing import Any

from onward.graph.build import build_graph
from onward.llm.models import check_model, model_from_env
from onward.nodes.deps import NodeDeps
from onward.store.database import Store, default_url
from onward.tools.registry import default_registry, load_tool_modules, tool_modules_from_env


def make_graph(db: str | None = None) -> Any:
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
    return build_graph(deps, hosted=True).compile()


graph = make_graph()
