"""onward's store as the checkpointer of a user's own LangGraph graph (issue 40): a state
holding a pydantic model, a dataclass and an Enum reads back as those types after a
resume in a new process, on both backends, as with LangGraph's own savers.

Under LangGraph's strict msgpack (``LANGGRAPH_STRICT_MSGPACK=true``; onward's serializer
is always strict: only allowlisted types are rebuilt), a compiled graph clones its saver
to widen the serializer's allowlist with the state's types; the clone must use its own
serializer (the store's error mapping is applied to it again, not bound to the original).
Without strict mode LangGraph's own savers rebuild any type with a warning that this
"will be blocked in a future version"; onward's read such values as plain data (said in
docs/store.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

USER_GRAPH = """\
import json
import sys
from dataclasses import dataclass
from enum import Enum
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel

from onward.store.database import Store


class Money(BaseModel):
    amount: int
    currency: str


@dataclass
class Item:
    name: str
    qty: int


class Color(Enum):
    RED = "red"
    BLUE = "blue"


class State(TypedDict, total=False):
    money: Money
    item: Item
    color: Color
    seen: str


def fill(state: State) -> State:
    return {"money": Money(amount=5, currency="EUR"), "item": Item("pen", 2), "color": Color.RED}


def check(state: State) -> State:
    kinds = [type(state[k]).__name__ for k in ("money", "item", "color")]
    return {"seen": ",".join(kinds)}


builder = StateGraph(State)
builder.add_node("fill", fill)
builder.add_node("check", check)
builder.add_edge(START, "fill")
builder.add_edge("fill", "check")
builder.add_edge("check", END)

if __name__ == "__main__":
    what, url = sys.argv[1], sys.argv[2]
    config = {"configurable": {"thread_id": "user-1"}}
    with Store(url) as store:
        graph = builder.compile(checkpointer=store.saver, interrupt_before=["check"])
        if what == "start":
            graph.invoke({}, config)
        else:
            values = graph.get_state(config).values
            kinds = {k: type(values[k]).__name__ for k in ("money", "item", "color")}
            final = graph.invoke(None, config)
            print(json.dumps({"kinds": kinds, "seen": final["seen"]}))
"""


def test_a_users_graph_gets_its_types_back_after_a_resume_in_a_new_process(
    db_url: str, tmp_path: Path
) -> None:
    (tmp_path / "user_graph.py").write_text(USER_GRAPH)

    def run(what: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "user_graph.py", what, db_url],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true"},
        )

    started = run("start")
    assert started.returncode == 0, started.stderr
    resumed = run("resume")
    assert resumed.returncode == 0, resumed.stderr
    out = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert out["kinds"] == {"money": "Money", "item": "Item", "color": "Color"}
    assert out["seen"] == "Money,Item,Color"
