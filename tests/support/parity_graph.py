"""A tiny plain LangGraph graph for the SDK parity test (tests/server/test_sdk_parity.py), served
by ``langgraph dev``: one human-in-the-loop question in langchain's batched shape (what
onward asks), then an answer message."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    status: str


def ask(state: State) -> dict[str, Any]:
    answer = interrupt(
        {
            "action_requests": [
                {"name": "pay", "args": {"amount": 5, "to": "bo"}, "description": "Pay bo?"}
            ],
            "review_configs": [
                {"action_name": "pay", "allowed_decisions": ["approve", "edit", "reject"]}
            ],
        }
    )
    return {"messages": [AIMessage(f"decided: {answer}")], "status": "done"}


graph = StateGraph(State).add_node("ask", ask).add_edge(START, "ask").add_edge("ask", END).compile()
