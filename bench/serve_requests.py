"""What one request costs each server: ``onward serve`` (SQLite) against ``langgraph dev``
(the same onward graph on LangGraph's in-memory server), request by request.

A served run is three requests from a ``langgraph_sdk`` user: ``threads.create``,
``runs.stream``, and (langgraph-sdk 0.4 and newer, since neither server sends an ``end``
event) ``runs.get`` once the stream closed, to tell a run that ended from a stream a proxy
cut. Here each server first makes a thread and streams a 3-step run on it, then answers
``--requests`` of each kind one after another from one ``httpx`` client (keep-alive):
``GET /ok``; ``POST /threads``; ``GET /threads/{id}/runs/{run_id}``; ``GET
/threads/{id}/state`` and ``POST /threads/{id}/history`` (limit 10) of that thread. For
each, the server process's CPU per request (psutil: user and system), servers and rounds
interleaved, medians over the rounds, and onward's against dev's. Then what each server
sent for that run: the bytes of its ``values`` events (compact JSON, as a client decodes
them), by the state's key.

    python bench/serve_requests.py [--requests 1000] [--rounds 3] [--before DIR]

``--before DIR``: also serve from the source tree DIR (e.g. a ``git worktree`` of an earlier
commit), interleaved with this tree's, named ``before``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from langgraph_sdk import get_sync_client

from _common import sqlite_durability
from serve_users import Server, cpu_of, langgraph_dev, onward_server

Call = Callable[[httpx.Client], httpx.Response]


def calls(server: Server, sent: dict[str, Counter[str]]) -> dict[str, Call]:
    """The requests measured, on a thread with one 3-step run of ``server``'s (the bytes
    of its values events by key into ``sent[server.name]``)."""
    sdk = get_sync_client(url=server.url, api_key=server.key(0))
    thread_id = sdk.threads.create()["thread_id"]
    parts = list(sdk.runs.stream(thread_id, "onward", input=server.run_input(server.workdir)))
    run_id = next(p.data["run_id"] for p in parts if p.event == "metadata")
    sent[server.name] = Counter()
    for part in parts:
        if part.event == "values":
            for key, value in part.data.items():
                sent[server.name][key] += len(json.dumps({key: value}, separators=(",", ":")))
    at = f"/threads/{thread_id}"
    return {
        "GET /ok": lambda c: c.get("/ok"),
        "POST /threads": lambda c: c.post("/threads", json={}),
        "GET run": lambda c: c.get(f"{at}/runs/{run_id}"),
        "GET state": lambda c: c.get(f"{at}/state"),
        "POST history": lambda c: c.post(f"{at}/history", json={"limit": 10}),
    }


def measure(server: Server, made: dict[str, Call], requests: int) -> dict[str, float]:
    """Server CPU µs per request of each kind."""
    headers = {"x-api-key": key} if (key := server.key(0)) else {}
    out = {}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as client:
        for name, call in made.items():
            for _ in range(20):  # warm: the first of a kind opens what it needs
                got = call(client)
                if got.status_code != 200:
                    sys.exit(f"{server.name}: {name} answered {got.status_code}: {got.text[:200]}")
            cpu0 = cpu_of(server.pid)
            for _ in range(requests):
                call(client)
            out[name] = (cpu_of(server.pid) - cpu0) / requests * 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", type=int, default=8470)
    parser.add_argument("--before", type=Path, help="also serve from this source tree")
    args = parser.parse_args()
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        servers = [onward_server(stack, "onward", f"sqlite:///{tmp}/a.db", args.port, None)]
        if args.before:
            db = f"sqlite:///{tmp}/b.db"
            servers.append(onward_server(stack, "before", db, args.port + 1, None, args.before))
        servers.append(langgraph_dev(stack, args.port + 2))
        sent: dict[str, Counter[str]] = {}
        made = {s.name: calls(s, sent) for s in servers}
        rounds: dict[str, list[dict[str, float]]] = {s.name: [] for s in servers}
        for _ in range(args.rounds):
            for server in servers:
                rounds[server.name].append(measure(server, made[server.name], args.requests))
    report(rounds, args)
    report_sent(sent["onward"], sent["langgraph dev"])


def report_sent(onward: Counter[str], dev: Counter[str]) -> None:
    print("bytes of the run's values events by key (compact JSON; onward, dev, difference)")
    for key in sorted(onward.keys() | dev.keys(), key=lambda k: dev[k] - onward[k]):
        print(f"{key:>16} {onward[key]:8} {dev[key]:8} {onward[key] - dev[key]:8}")
    total = sum(onward.values()), sum(dev.values())
    print(f"{'all':>16} {total[0]:8} {total[1]:8} {total[0] - total[1]:8}")


def report(rounds: dict[str, list[dict[str, float]]], args: Any) -> None:
    print(f"durability (read back): {sqlite_durability()}; langgraph dev: checkpoints in memory")
    print(f"server CPU µs per request, medians of {args.rounds} rounds of {args.requests}")
    kinds = list(next(iter(rounds.values()))[0])
    names = list(rounds)
    print(f"{'request':>14} " + " ".join(f"{n:>14}" for n in names) + "   onward/dev")
    for kind in kinds:
        med = {n: statistics.median(r[kind] for r in rounds[n]) for n in names}
        cells = " ".join(f"{med[n]:14.0f}" for n in names)
        print(f"{kind:>14} {cells}   {med['onward'] / med['langgraph dev']:10.2f}")


if __name__ == "__main__":
    main()
