"""Where a served run's CPU goes, by the server's threads.

``onward serve``'s app runs here under uvicorn in this process, the users are
``langgraph_sdk`` clients on threads of their own (``client``), each streaming runs of
``serve_users.py``'s 3-step no-op plan on new threads with its own API token, after a
warm-up of two runs a user. The CPU each thread spent (``/proc/self/task``), summed by
thread name without its number, per run: ``onward-run`` drives runs (the graph),
``uvicorn-loop`` is the event loop (HTTP, routing, SSE, values events' JSON), ``AnyIO
worker thread`` the requests' synchronous work (a run's decision and records),
``onward-feed`` keeps streamed events in the store. Then the same run through
``Onward.run`` in this process, for what serving adds.

    python bench/serve_threads.py [--users 1] [--runs 300] [--postgres]

A thread that ended during the measured runs is not in the table (its CPU went with
it): ``left out`` is the process's CPU that no live thread holds, which is LangGraph's
task pool, made per run (its checkpoint writes and tasks; the server's own threads are
kept in pools). ``Onward.run`` is split the same way: its calling thread, the rest.
Last, the same run streamed through ``Onward.stream_modes`` with ``values`` alone and
with the modes the server's drive asks for a ``values`` client (``values`` and
``checkpoints``: LangGraph's ``checkpoints`` events name the checkpoint that saved each
superstep's values, so the feed can keep a reference instead of the state), rounds
interleaved (medians of seven): what naming the checkpoints costs a run.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from langgraph_sdk import get_sync_client

from _common import pg_durability, pg_schema, scratch_store, served_here, sqlite_durability
from onward import Onward
from onward.serve.app import create_app
from serve_users import STEPS, runs_alone

CLOCK = os.sysconf("SC_CLK_TCK")
PORT = 8641


def by_thread() -> Counter[str]:
    """CPU seconds of each live thread of this process, by name without its number."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: Counter[str] = Counter()
    for task in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{task}/stat").read_text()
        except OSError:
            continue  # ended since the listing
        fields = stat[stat.rfind(")") + 2 :].split()
        name = names.get(int(task), "(not Python's) " + stat[stat.find("(") + 1 : stat.rfind(")")])
        out[re.sub(r"[-_ ]?\d+(_\d+)?$", "", name)] += (int(fields[11]) + int(fields[12])) / CLOCK
    return out


def process_cpu() -> float:
    times = os.times()
    return times.user + times.system


def served(db: str, workdir: Path, users: int, runs: int) -> tuple[Counter[str], float]:
    """(CPU seconds per run by thread group, the process's CPU per run) of ``runs`` runs."""
    os.environ["ONWARD_API_TOKENS"] = ",".join(f"bench-{i}:user{i}" for i in range(users))
    app = create_app(db, workdir=workdir, model=None, recover=False)

    def one(i: int) -> None:
        client = get_sync_client(url=url, api_key=f"bench-{i % users}")
        thread_id = client.threads.create()["thread_id"]
        run = {"goal": "three no-op steps", "plan": {"steps": STEPS}}
        list(client.runs.stream(thread_id, "onward", input=run, stream_mode="values"))

    with (
        served_here(app, PORT) as url,
        ThreadPoolExecutor(users, thread_name_prefix="client") as pool,
    ):
        list(pool.map(one, range(2 * users)))
        before, cpu0 = by_thread(), process_cpu()
        list(pool.map(one, range(runs)))
        after, cpu = by_thread(), process_cpu() - cpu0
    groups = Counter({k: (after[k] - before.get(k, 0.0)) / runs for k in after})
    return groups, cpu / runs


def local(db: str, runs: int) -> tuple[float, float]:
    """CPU seconds per run of the same run through ``Onward.run``: (the process's, the
    calling thread's; the rest is LangGraph's executor threads, made per run)."""
    with Onward(db) as ow:
        runs_alone(ow, 10)
        cpu0, own0 = process_cpu(), time.thread_time()
        runs_alone(ow, runs)
        return (process_cpu() - cpu0) / runs, (time.thread_time() - own0) / runs


def modes_cost(db: str, runs: int, rounds: int = 7) -> dict[str, float]:
    """CPU seconds per run streamed with ``values`` alone and with ``checkpoints`` too,
    medians of ``rounds`` interleaved rounds, and the median of each round's difference,
    by the label each is printed with."""
    served = ["checkpoints", "values"]  # onward.serve.drives.Pairing.graph_modes
    kinds: dict[str, list[str]] = {"values": ["values"], "values+checkpoints": served}
    got: dict[str, list[float]] = {name: [] for name in kinds}
    with Onward(db) as ow:

        def one(modes: list[str]) -> None:
            thread_id = ow.start("three no-op steps", plan={"steps": STEPS})
            for _ in ow.stream_modes(thread_id, modes):  # type: ignore[arg-type]
                pass

        for _ in range(rounds):
            for name, modes in kinds.items():
                for _ in range(3):
                    one(modes)
                cpu0 = process_cpu()
                for _ in range(runs):
                    one(modes)
                got[name].append((process_cpu() - cpu0) / runs)
    out = {f"Onward.stream_modes {name}": statistics.median(got[name]) for name in kinds}
    pairs = zip(got["values+checkpoints"], got["values"], strict=True)
    out["checkpoints' cost, median of rounds"] = statistics.median(a - b for a, b in pairs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    with ExitStack() as stack:
        tmp, db = scratch_store(stack, args.postgres, "serve.db")
        groups, whole = served(db, tmp, args.users, args.runs)
        alone = local(
            stack.enter_context(pg_schema()) if args.postgres else f"sqlite:///{tmp}/l.db",
            args.runs,
        )
        costs = modes_cost(
            stack.enter_context(pg_schema()) if args.postgres else f"sqlite:///{tmp}/m.db",
            max(args.runs // 7, 20),
        )
    backend = "Postgres" if args.postgres else "SQLite"
    stated = pg_durability() if args.postgres else sqlite_durability()
    print(f"durability (read back; served and Onward.run alike): {stated}")
    print(f"{backend}, {args.users} users, {args.runs} runs: CPU ms a run by thread")
    server = {k: v for k, v in groups.items() if k != "client"}
    for name, seconds in sorted(groups.items(), key=lambda kv: -kv[1]):
        if seconds * 1000 >= 0.05:
            print(f"{name:>32} {seconds * 1000:7.2f}")
    print(f"{'server threads':>32} {sum(server.values()) * 1000:7.2f}")
    print(f"{'left out (threads ended)':>32} {(whole - sum(groups.values())) * 1000:7.2f}")
    print(f"{'Onward.run, same process':>32} {alone[0] * 1000:7.2f}")
    print(f"{'of it its calling thread':>32} {alone[1] * 1000:7.2f}")
    for name, seconds in costs.items():
        print(f"{name:>38} {seconds * 1000:7.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
