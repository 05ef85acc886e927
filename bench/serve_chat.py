"""A long chat through ``onward serve``: many goals on one thread, each a follow-up message.

The app runs here under uvicorn (SQLite, or ``--postgres`` a fresh schema) with a
``ScriptedChatModel`` that plans every goal as three ``noop`` steps; one
``langgraph_sdk`` user sends ``--goals`` messages to one thread, streaming each run's
``values`` as agent-chat-ui does, then reads the thread as a chat UI does on opening it
(``get_state``, ``get_history(limit=10)``). For the first ten goals and the last ten,
medians: the run's time, its first values event, the kB of values it streamed, and the two
reads. Each values event carries the whole state, the conversation so far included, as on
LangGraph's own server: what a run streams grows with the thread.

    python bench/serve_chat.py [--goals 60] [--postgres]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import ExitStack
from dataclasses import dataclass

from langgraph_sdk import get_sync_client

from _common import pg_durability, scratch_store, served_here, sqlite_durability
from onward.llm.fake import ScriptedChatModel
from onward.serve.app import create_app

PORT = 8657
PLAN = {
    "steps": [{"id": f"s{j}", "tool": "noop", "args_json": f'{{"value":{j}}}'} for j in (0, 1, 2)]
}
"""What the model answers every goal with: three ``noop`` steps."""


@dataclass
class Goal:
    seconds: float
    first: float
    kb: float
    get_state: float
    history10: float
    status: str | None


NUMBERS = ("seconds", "first", "kb", "get_state", "history10")


def goals(url: str, n: int) -> list[Goal]:
    client = get_sync_client(url=url)
    thread_id = client.threads.create()["thread_id"]
    out = []
    for i in range(n):
        message = {"messages": [{"type": "human", "content": f"goal {i}"}]}
        t0, first, size, last = time.perf_counter(), float("nan"), 0, None
        for part in client.runs.stream(thread_id, "onward", input=message, stream_mode="values"):
            if part.event == "values":
                first = first if first == first else time.perf_counter() - t0
                last = part.data
            size += len(json.dumps(part.data))
        seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        client.threads.get_state(thread_id)
        t2 = time.perf_counter()
        client.threads.get_history(thread_id, limit=10)
        t3 = time.perf_counter()
        status = last.get("status") if isinstance(last, dict) else None
        out.append(Goal(seconds, first, size / 1000, t2 - t1, t3 - t2, status))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goals", type=int, default=60)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    with ExitStack() as stack:
        tmp, db = scratch_store(stack, args.postgres, "chat.db")
        app = create_app(db, workdir=tmp, model=ScriptedChatModel(default=PLAN), recover=False)
        got = goals(stack.enter_context(served_here(app, PORT)), args.goals)
    print("durability (read back):", pg_durability() if args.postgres else sqlite_durability())
    heads = ("run ms", "1st ms", "kB/run")
    print(
        f"{'goals':>9} "
        + " ".join(f"{h:>7}" for h in heads)
        + f" {'get_state':>9} {'history10':>9}"
    )
    for lo in (0, max(0, args.goals - 10)):
        seg = got[lo : lo + 10]
        med = {k: statistics.median(getattr(g, k) for g in seg) for k in NUMBERS}
        print(
            f"{lo + 1:>4}-{lo + len(seg):<4} {med['seconds'] * 1000:7.0f} "
            f"{med['first'] * 1000:7.0f} {med['kb']:7.0f} "
            f"{med['get_state'] * 1000:8.1f}ms {med['history10'] * 1000:8.1f}ms"
        )
    ended = {g.status for g in got}
    print("every goal ended:", ", ".join(sorted(str(s) for s in ended)))


if __name__ == "__main__":
    main()
