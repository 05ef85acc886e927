"""The same ``langgraph_sdk`` calls against any LangGraph-Server-compatible URL, recorded as
response *shapes* (each key's JSON type, nested; graph-specific state values left out), so
tests/server/test_sdk_parity.py can compare ``onward serve`` with the reference ``langgraph dev``.

Run by hand: ``python -m tests.support.sdk_parity URL ASSISTANT INPUT_JSON ANSWER_JSON`` prints the
shapes as JSON."""

from __future__ import annotations

import json
import sys
from typing import Any

from langgraph_sdk import get_sync_client

OPAQUE = frozenset({"values", "args", "writes", "context", "metadata"})
"""Keys whose contents belong to the graph (its state, a tool's args, a node's writes, its
context) or to the caller and the server (free-form ``metadata``): only their JSON type
is compared."""
BY_ID = frozenset({"interrupts"})
"""Mappings keyed by ids (a thread's interrupts by task id): compared as ``{"<id>": ...}``."""


def kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list"
    return "dict" if isinstance(value, dict) else type(value).__name__


def shape(value: Any, depth: int = 3) -> Any:
    """A value's shape: a dict's keys mapped to their shapes; a list as the shape of its
    first item (``[]`` when empty); anything else its JSON type name."""
    if isinstance(value, dict) and depth > 0:
        return {
            k: kind(v)
            if k in OPAQUE
            else {"<id>": shape(next(iter(v.values())), depth - 2)}
            if k in BY_ID and isinstance(v, dict) and v
            else shape(v, depth - 1)
            for k, v in value.items()
        }
    if isinstance(value, list) and depth > 0:
        return [shape(value[0], depth - 1)] if value else []
    return kind(value)


def observe(url: str, assistant: str, first_input: Any, answer: Any) -> dict[str, Any]:
    """One conversation: a thread, a streamed run to a question, the thread and its state
    while it waits, the answered run, runs, history, search and count. ``shapes``: each
    response's shape; ``facts``: what must be equal (statuses, stream event names, how many
    interrupts and decisions were asked)."""
    client = get_sync_client(url=url, api_key=None)
    seen: dict[str, Any] = {}
    facts: dict[str, Any] = {}
    seen["assistants.search"] = shape(client.assistants.search(limit=1))
    thread = client.threads.create(metadata={"parity": "yes"})
    tid = thread["thread_id"]
    seen["threads.create"] = shape(thread)
    parts = list(
        client.runs.stream(tid, assistant, input=first_input, stream_mode=["values", "updates"])
    )
    facts["runs.stream events"] = sorted({p.event for p in parts})
    seen["runs.stream metadata"] = shape(next(p.data for p in parts if p.event == "metadata"))
    asked = [p.data for p in parts if p.event == "updates" and "__interrupt__" in p.data]
    seen["runs.stream interrupt update"] = shape(asked[-1] if asked else None)
    seen["threads.get waiting"] = shape(client.threads.get(tid))
    facts["thread status waiting"] = client.threads.get(tid)["status"]
    state = client.threads.get_state(tid)
    seen["threads.get_state waiting"] = shape(state)
    seen["interrupt"] = shape(state["interrupts"][0] if state["interrupts"] else None)
    seen["interrupt value"] = shape(
        state["interrupts"][0]["value"] if state["interrupts"] else None
    )
    seen["task"] = shape(state["tasks"][0] if state["tasks"] else None)
    (run,) = client.runs.list(tid)
    seen["runs.list"] = shape(run)
    facts["run status waiting"] = run["status"]
    out = client.runs.wait(tid, assistant, command={"resume": answer})
    seen["runs.wait answered"] = kind(out)
    facts["thread status answered"] = client.threads.get(tid)["status"]
    runs = client.runs.list(tid)
    seen["runs.get"] = shape(client.runs.get(tid, runs[0]["run_id"]))
    seen["runs.join"] = kind(client.runs.join(tid, runs[0]["run_id"]))
    facts["run statuses"] = [r["status"] for r in runs]
    facts["interrupts asked"] = len(state["interrupts"])
    facts["decisions asked"] = len(state["interrupts"][0]["value"]["action_requests"])
    seen["threads.get_state answered"] = shape(client.threads.get_state(tid))
    history = client.threads.get_history(tid, limit=2)
    seen["threads.get_history"] = shape(history)
    seen["threads.search"] = shape(client.threads.search(metadata={"parity": "yes"}, limit=1))
    seen["threads.count"] = kind(client.threads.count())
    copy = client.threads.copy(tid)
    seen["threads.copy"] = shape(copy)
    facts["copy status"] = client.threads.get(copy["thread_id"])["status"]  # type: ignore[index]
    (mine,) = client.assistants.search(graph_id=assistant, limit=1)
    seen["assistants.get_schemas"] = shape(client.assistants.get_schemas(mine["assistant_id"]), 1)
    seen["assistants.get_versions"] = shape(client.assistants.get_versions(mine["assistant_id"]))
    # A run of its own, joined by stream after it ended: which events a rejoin gets.
    other = client.threads.create()["thread_id"]
    run = client.runs.create(other, assistant, input=first_input)
    seen["runs.create"] = shape(run)
    client.runs.join(other, run["run_id"])
    facts["runs.join_stream events"] = sorted(
        {p.event for p in client.runs.join_stream(other, run["run_id"])}
    )
    return {"shapes": seen, "facts": facts}


def differences(reference: Any, ours: Any, where: str = "") -> list[str]:
    """Where the shape ``ours`` drifts from ``reference``: a key it lacks, or another
    type. Keys only ``ours`` has are extensions, not drift (onward adds its own, e.g.
    ``onward``); a null on either side is a field left unset this time; an empty list
    matches any list."""
    if isinstance(reference, dict) and isinstance(ours, dict):
        out: list[str] = []
        for key, ref in reference.items():
            if key not in ours:
                out.append(f"{where}.{key}: missing")
            else:
                out += differences(ref, ours[key], f"{where}.{key}")
        return out
    if isinstance(reference, list) and isinstance(ours, list):
        return differences(reference[0], ours[0], f"{where}[0]") if reference and ours else []
    if reference == ours or "null" in (reference, ours):
        return []
    return [f"{where}: {_name(reference)} in the reference, {_name(ours)} in onward"]


def _name(s: Any) -> str:
    return s if isinstance(s, str) else kind(s)


if __name__ == "__main__":
    url, assistant, first, answer = sys.argv[1:5]
    print(json.dumps(observe(url, assistant, json.loads(first), json.loads(answer)), indent=2))
