"""Bytes a chat client receives per step as a run grows, by stream mode.

Runs one N-step chain (``slow`` steps, one after the other) through a running ``onward
serve`` with ``langgraph_sdk`` once per stream mode, and prints for each mode the SSE
bytes of the whole run and of the first and last tenth of its steps (per step). With
``--reference URL`` (a ``langgraph dev`` serving a graph ``long`` that appends one
message of 200 characters per step, 100 steps) it prints the same for LangGraph's own
server.

    onward serve --tools tests/support/hitl_tools.py --port 8420 &
    python bench/stream_bytes.py --url http://127.0.0.1:8420 --steps 150
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from langgraph_sdk import get_sync_client

MODES = ("values", "updates", "messages-tuple")


def chain(n: int) -> dict[str, Any]:
    steps = [
        {
            "id": f"s{i}",
            "tool": "slow",
            "args": {"value": i},
            **({"depends_on": [f"s{i - 1}"]} if i else {}),
        }
        for i in range(n)
    ]
    return {"goal": f"{n} steps", "plan": {"steps": steps}}


def sizes(url: str, assistant: str, run_input: Any, mode: str) -> list[int]:
    """The bytes of each event's data a stream of ``mode`` sends."""
    client = get_sync_client(url=url, api_key=None)
    tid = client.threads.create()["thread_id"]
    parts = client.runs.stream(tid, assistant, input=run_input, stream_mode=[mode])
    return [len(json.dumps(p.data)) for p in parts if p.event not in ("metadata", "end")]


def report(name: str, mode: str, events: list[int], steps: int) -> None:
    tenth = max(1, len(events) // 10)
    first, last = sum(events[:tenth]), sum(events[-tenth:])
    print(
        f"{name:9} {mode:15} events {len(events):5}  total {sum(events) / 1e6:8.2f} MB  "
        f"per step {sum(events) / steps / 1e3:8.1f} kB  "
        f"first tenth {first / tenth / 1e3:7.1f} kB/event  "
        f"last tenth {last / tenth / 1e3:7.1f} kB/event"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8420")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--reference", help="a langgraph dev URL serving the graph 'long'")
    args = parser.parse_args()
    for mode in MODES:
        report("onward", mode, sizes(args.url, "onward", chain(args.steps), mode), args.steps)
    if args.reference:
        for mode in MODES:
            report("reference", mode, sizes(args.reference, "long", {"messages": []}, mode), 100)


if __name__ == "__main__":
    main()
