"""note: budget warnings at 50 % and 80 %, given once each, in the chat and the event log."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from onward.model.state import NoteTask, RunUpdate
from onward.nodes.deps import NodeDeps, thread_of
from onward.observe.kinds import EventKind


def note(task: Any, config: RunnableConfig, runtime: Runtime[NodeDeps]) -> RunUpdate:
    deps = runtime.context
    assert isinstance(task, NoteTask)
    thread_id = thread_of(config)
    if deps.events is not None:
        for marker, text in zip(task.markers, task.texts, strict=True):
            deps.events.record(
                thread_id, EventKind.BUDGET_WARNING, {"marker": marker, "text": text}
            )
    return {
        "budget_warnings": task.markers,
        "messages": [AIMessage("Budget warning: " + "; ".join(task.texts))],
        "wave": task.wave,
    }
