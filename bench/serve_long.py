"""Long threads through ``onward serve``: what a run of N no-op steps costs over HTTP, and
what reading its thread costs afterwards, against the same run through ``Onward.run``.

For each N (1 / 100 / 1,000 by default) on a fresh store: the run sent as ``runs.wait``
input (seconds, and per step), the same plan through ``Onward.run`` on a store of the
same backend, the bytes of the stream events the server kept for the run, then the
reads a chat UI makes when it opens the thread: ``get_history(limit=10)`` once first
(cold: the server has read nothing of the thread yet but its final state), then
``get_state`` and ``get_history(limit=10)`` best of 3, and the first values event of a
follow-up ``runs.stream``. ``history10: answered / decoded``: the same history read as raw
HTTP, split into the time until the whole answer arrived and the client's decoding of it
(``orjson``, as ``langgraph_sdk`` decodes), with the answer's size.

    python bench/serve_long.py --steps 10,100,1000 [--postgres] [--dev] [--only-run] [--py-spy DIR]

``--only-run``: the runs only (no reads afterwards); ``--py-spy DIR``: the server sampled
by py-spy (plain mode, raw collapsed stacks) while it drives each run, into
``DIR/serve-N.txt``; ``--dev``: after each N, the same run and reads on ``langgraph dev``
(the same onward graph on LangGraph's in-memory server, as ``bench/serve_users.py`` runs
it; a fresh server for each N), named ``dev``: its ``local s`` is onward's ``Onward.run``,
so its ``ratio`` says how its HTTP run compares with onward's own; it keeps its stream
events in memory, so ``events kB`` is blank; its runs start when its queue is next polled,
so its ``1st event`` is about a second whatever N.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
from langgraph_sdk import get_sync_client

from _common import any_size, chain_plan, pg_durability, pg_schema, sampled, sqlite_durability
from onward import Onward
from onward.store.database import Store
from serve_users import langgraph_dev

POLICY = "max_plan_steps: 1000000\n"


@contextmanager
def server(db: str, workdir: Path, port: int) -> Iterator[tuple[str, int]]:
    policy = workdir / "policy.yaml"
    policy.write_text(POLICY)
    argv = ["serve", "--db", db, "--port", str(port), "--policy", str(policy)]
    argv += ["--max-steps", "10000000"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "onward", *argv], cwd=workdir, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                if httpx.get(url + "/ok", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(20)


def as_input(n: int) -> dict[str, Any]:
    steps = [
        {"id": s.id, "tool": s.tool, "args": s.args, "depends_on": list(s.depends_on)}
        for s in chain_plan(n).steps
    ]
    return {"goal": f"{n} no-op steps", "plan": {"steps": steps}}


def best_ms(call: Callable[[], Any], rounds: int = 3) -> float:
    """The call's best wall time in ms."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best * 1000


def cpu_ms(call: Callable[[], Any], pid: int, calls: int = 10) -> float:
    """The CPU time the server (``pid``) spends on one call, in ms, averaged over
    ``calls`` (its clock ticks are 10 ms): on a busy host what a read costs, not its
    wait."""
    server = psutil.Process(pid)
    t0 = _cpu(server)
    for _ in range(calls):
        call()
    return (_cpu(server) - t0) * 1000 / calls


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def history_parts(url: str, thread_id: str) -> tuple[float, float, float]:
    """``get_history(limit=10)`` as a client gets it, best of 3: ms until its whole answer
    has arrived, ms to decode it (``orjson.loads``, as ``langgraph_sdk`` does), its MB."""
    arrived = decoded = float("inf")
    size = 0
    with httpx.Client(base_url=url, timeout=120) as http:
        for _ in range(3):
            t0 = time.perf_counter()
            body = http.post(f"/threads/{thread_id}/history", json={"limit": 10}).content
            t1 = time.perf_counter()
            orjson.loads(body)
            t2 = time.perf_counter()
            arrived, decoded, size = min(arrived, t1 - t0), min(decoded, t2 - t1), len(body)
    return arrived * 1000, decoded * 1000, size / 1e6


def first_event(url: str, thread_id: str) -> float:
    """Milliseconds to the first values event of a follow-up message."""
    client = get_sync_client(url=url, api_key=None)
    message: Any = {"messages": [{"type": "human", "content": "and now?"}]}
    t0 = time.perf_counter()
    parts = client.runs.stream(
        thread_id,
        "onward",
        input=message,
        stream_mode=["values"],
    )
    for part in parts:
        if part.event == "values":
            took = time.perf_counter() - t0
            for _rest in parts:
                pass
            return took * 1000
    return float("nan")


def over_http(
    db: str, workdir: Path, port: int, n: int, only_run: bool = False, spy: Path | None = None
) -> dict[str, Any]:
    with server(db, workdir, port) as (url, pid):
        row = run_and_read(url, pid, as_input(n), only_run, spy / f"serve-{n}.txt" if spy else None)
        row["event_bytes"] = kept_bytes(db, row.pop("run_id"))
    return row | {"steps": n}


def on_dev(n: int, port: int, only_run: bool) -> dict[str, Any]:
    """The N-step run and the reads on ``langgraph dev``, a fresh server."""
    with ExitStack() as stack:
        dev = langgraph_dev(stack, port)
        run = as_input(n) | {"workdir": str(dev.workdir), "policy": {"max_plan_steps": 10**6}}
        row = run_and_read(dev.url, dev.pid, run | {"goal": {"objective": run["goal"]}}, only_run)
    return row | {"steps": n, "event_bytes": float("nan")}


def run_and_read(
    url: str, pid: int, run: dict[str, Any], only_run: bool, spy: Path | None = None
) -> dict[str, Any]:
    """The run as ``runs.wait`` input on a new thread (seconds, the server's CPU seconds),
    then, unless ``only_run``, the reads a chat UI makes of its thread."""
    client = get_sync_client(url=url, api_key=None)
    thread_id = client.threads.create()["thread_id"]
    with sampled(pid, spy):
        t0, cpu0 = time.perf_counter(), _cpu(psutil.Process(pid))
        client.runs.wait(thread_id, "onward", input=run)
        took = time.perf_counter() - t0
        run_cpu = _cpu(psutil.Process(pid)) - cpu0
    run_id = client.runs.list(thread_id)[0]["run_id"]
    row = {"run_id": run_id, "http_s": took, "http_cpu_s": run_cpu}
    nan = float("nan")
    if only_run:
        for key in ("cold_history_cpu", "get_state_ms", "get_state_cpu", "history_ms"):
            row[key] = nan
        row |= {"answer_ms": nan, "decode_ms": nan, "history_mb": nan}
        return row | {"history_cpu": nan, "state_kb": nan, "first_event_ms": nan}
    history = lambda: client.threads.get_history(thread_id, limit=10)  # noqa: E731
    state = lambda: client.threads.get_state(thread_id)  # noqa: E731
    row["cold_history_cpu"] = cpu_ms(history, pid, 1)
    row["get_state_ms"], row["get_state_cpu"] = best_ms(state), cpu_ms(state, pid)
    row["history_ms"], row["history_cpu"] = best_ms(history), cpu_ms(history, pid)
    row["answer_ms"], row["decode_ms"], row["history_mb"] = history_parts(url, thread_id)
    row["state_kb"] = len(json.dumps(client.threads.get_state(thread_id)["values"])) / 1e3
    row["first_event_ms"] = first_event(url, thread_id)
    return row


def kept_bytes(db: str, run_id: str) -> int:
    store = Store(db)
    try:
        return sum(len(json.dumps(e.data)) for e in store.threads.events(run_id, 0, 10**7))
    finally:
        store.close()


def local(db: str, n: int) -> tuple[float, float]:
    """(seconds, CPU seconds) of the run through ``Onward.run``."""
    with Onward(db) as ow:
        t0, cpu0 = time.perf_counter(), time.process_time()
        ow.run(f"{n} no-op steps", plan=chain_plan(n), **any_size())
        return time.perf_counter() - t0, time.process_time() - cpu0


@contextmanager
def stores(postgres: bool) -> Iterator[tuple[str, str]]:
    """Two fresh stores of one backend: (for the server, for ``Onward.run``)."""
    if postgres:
        with pg_schema() as a, pg_schema() as b:
            yield a, b
        return
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{tmp}/serve.db", f"sqlite:///{tmp}/local.db"


def measure(
    n: int, postgres: bool, port: int, only_run: bool = False, spy: Path | None = None
) -> dict[str, Any]:
    with stores(postgres) as (served, plain), tempfile.TemporaryDirectory() as wd:
        row = over_http(served, Path(wd), port, n, only_run, spy)
        row["local_s"], row["local_cpu_s"] = local(plain, n)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="10,100,1000")
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--dev", action="store_true", help="langgraph dev too")
    parser.add_argument("--port", type=int, default=8437)
    parser.add_argument("--only-run", action="store_true", help="no reads after the run")
    parser.add_argument("--py-spy", type=Path, help="sample the server into this folder")
    args = parser.parse_args()
    if args.py_spy:
        args.py_spy.mkdir(parents=True, exist_ok=True)
    # Served and local runs use the same store settings; say which, read back.
    durability = pg_durability() if args.postgres else sqlite_durability()
    if args.dev:
        durability += "; langgraph dev: checkpoints in memory (no durability to set)"
    print("durability:", durability)
    print(
        f"{'server':>6} {'steps':>6} {'http s':>8} {'local s':>8} {'ratio':>6} "
        f"{'CPU ratio':>9} {'events kB':>10} {'state kB':>9} {'get_state':>10} "
        f"{'history10':>10} {'1st event':>10} | server CPU: {'get_state':>10} "
        f"{'history10':>10} {'cold hist':>10} | history10: {'answered':>9} {'decoded':>9} "
        f"{'MB':>5}"
    )
    for n in (int(x) for x in args.steps.split(",")):
        r = measure(n, args.postgres, args.port, args.only_run, args.py_spy)
        print_row("onward", r)
        if args.dev:
            local = {"local_s": r["local_s"], "local_cpu_s": r["local_cpu_s"]}
            print_row("dev", on_dev(n, args.port + 1, args.only_run) | local)


def print_row(name: str, r: dict[str, Any]) -> None:
    print(
        f"{name:>6} {r['steps']:6} {r['http_s']:8.2f} {r['local_s']:8.2f} "
        f"{r['http_s'] / r['local_s']:6.2f} {r['http_cpu_s'] / r['local_cpu_s']:9.2f} "
        f"{r['event_bytes'] / 1e3:10.1f} {r['state_kb']:9.1f} {r['get_state_ms']:8.1f}ms "
        f"{r['history_ms']:8.1f}ms {r['first_event_ms']:8.1f}ms |             "
        f"{r['get_state_cpu']:8.1f}ms {r['history_cpu']:8.1f}ms {r['cold_history_cpu']:8.1f}ms"
        f" |            {r['answer_ms']:7.1f}ms {r['decode_ms']:7.1f}ms {r['history_mb']:5.1f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
