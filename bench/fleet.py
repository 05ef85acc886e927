"""Fleet benchmark: runs per minute with 1 versus 2 ``onward worker`` processes.

What is compared
    ``--runs`` runs (default 24) are submitted to a fresh store, each a chain of
    ``--steps`` I/O-bound steps (default 3 ``wait`` steps of ``--io`` seconds, 0.2 s:
    a tool waiting on a network or a disk). Then 1 or 2 worker processes
    (``onward worker --exit-when-idle``, one run at a time each) drain the queue. The
    time from starting the workers to the last one exiting gives runs per minute.
    Target: 2 workers ÷ 1 worker ≥ 1.7.

How it is measured
    Interleaved rounds (1 then 2 workers, the order alternating from round to round),
    each on a fresh Postgres schema (``--backend sqlite`` for a SQLite file); medians
    over ``--rounds`` (default 3). Worker start-up (Python, imports) is inside the time,
    as it is for a real fleet that scales out.

Run from the repo root: ``python bench/fleet.py [--runs 24] [--rounds 3]``.

One worker at rising concurrency (``--concurrency 1,8,32``)
    Postgres only. For each concurrency C, 2·C runs (at least 16) of 3 steps that each wait
    ``--io`` seconds (0.5 s here) are submitted, then one ``onward worker --concurrency C
    --exit-when-idle`` drains them. Printed: wall ÷ ideal, the wall from the first tool call's
    start to the last one's end (``ONWARD_EXECUTION_LOG``; the ideal: ⌈runs ÷ C⌉ · steps ·
    io); the worker's start-up to exit with nothing to do (an idle worker on the same store,
    measured first); CPU per step of the worker process and of its Postgres backends (sampled
    from ``/proc``, so the server must run on this host), less the idle worker's; and the
    peak of the worker's connections in ``pg_stat_activity`` (by ``application_name``),
    which ``ONWARD_PG_POOL_SIZE`` (default 10) bounds.

Side by side (``--compare 1,8,32,64``)
    The same I/O-bound runs (2·C of them, at least 16) at each concurrency C, on the same
    Postgres (``ONWARD_BENCH_PG``): one ``onward worker --concurrency C``; two workers at
    C/2 each (C ≥ 2); a DBOS application draining a queue with ``worker_concurrency`` C
    (bench/_dbos.py); plain LangGraph, the same three waits as a graph compiled with
    ``PostgresSaver`` on a ``psycopg_pool`` pool of ``--lg-pool`` connections (10, as
    onward's), C runs at a time on a thread pool. Each system runs in processes of its
    own (a fresh schema or database), measured as above: wall ÷ ideal from its steps' logged
    times, CPU per step of its processes (less an idle start-up's; DBOS's enqueueing is left
    out, as onward's submitting is) and of their Postgres backends, peak connections, and
    start-up (the process started and stopped with nothing to do). Ratios: onward ÷ DBOS.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from _common import PG_URL, pg_durability, pg_schema, write_json
from onward import Onward, Plan, PlanStep, RunStatus


def io_plan(steps: int, io: float) -> Plan:
    return Plan(
        steps=[
            PlanStep(
                id=f"io{i}",
                tool="wait",
                args={"seconds": io},
                depends_on=[f"io{i - 1}"] if i else [],
            )
            for i in range(steps)
        ]
    )


@contextmanager
def store(backend: str) -> Iterator[str]:
    if backend == "postgres":
        with pg_schema() as url:
            yield url
        return
    with tempfile.TemporaryDirectory(prefix="onward-fleet-") as tmp:
        yield f"sqlite:///{Path(tmp) / 'onward.db'}"


def one_round(workers: int, runs: int, steps: int, io: float, backend: str) -> float:
    """Seconds for ``workers`` processes to finish ``runs`` submitted runs."""
    with store(backend) as db, tempfile.TemporaryDirectory(prefix="onward-fleet-") as wd:
        with Onward(db, model=None) as ow:
            tids = [ow.submit(plan=io_plan(steps, io), workdir=wd) for _ in range(runs)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ONWARD_", "OPENAI_"))}
        env["ONWARD_BLOCK_MODEL_REQUESTS"] = "1"
        cmd = [sys.executable, "-m", "onward", "worker", "--db", db, "--exit-when-idle"]
        start = time.perf_counter()
        procs = [
            subprocess.Popen([*cmd, "--poll", "0.05"], cwd=wd, env=env, stderr=subprocess.DEVNULL)
            for _ in range(workers)
        ]
        for p in procs:
            if p.wait(600) != 0:
                raise SystemExit(f"a worker exited with {p.returncode}")
        elapsed = time.perf_counter() - start
        with Onward(db, model=None) as ow:
            bad = [t for t in tids if ow.get(t).status is not RunStatus.DONE]
        if bad:
            raise SystemExit(f"{len(bad)} runs did not finish")
        return elapsed


class Backends:
    """Samples the connections of one ``application_name``: their peak number, and the CPU
    seconds of their server processes (the last reading of each, from ``/proc``)."""

    def __init__(self, url: str, app: str, database: str | None = None) -> None:
        """``database``: count that database's connections instead (DBOS names its own)."""
        self.url, self.app, self.database = url, app, database
        self.peak = 0
        self._cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Backends:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def cpu(self) -> float:
        return sum(self._cpu.values())

    def _sample(self) -> None:
        import psycopg

        tick = os.sysconf("SC_CLK_TCK")
        with psycopg.connect(self.url, autocommit=True, application_name="bench") as conn:
            while not self._stop.wait(0.02):
                column = "datname" if self.database else "application_name"
                pids = [
                    r[0]
                    for r in conn.execute(
                        f"SELECT pid FROM pg_stat_activity WHERE {column} = %s",
                        (self.database or self.app,),
                    )
                ]
                self.peak = max(self.peak, len(pids))
                for pid in pids:
                    try:
                        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    except OSError:
                        continue
                    self._cpu[pid] = (int(fields[11]) + int(fields[12])) / tick


def worker_round(db: str, wd: str, concurrency: int, app: str) -> tuple[float, float, Backends]:
    """(wall s, worker CPU s, its backends) of one ``onward worker`` draining the queue."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ONWARD_", "OPENAI_"))}
    env |= {"ONWARD_BLOCK_MODEL_REQUESTS": "1", "PGAPPNAME": app}
    env["ONWARD_EXECUTION_LOG"] = str(Path(wd) / "calls.jsonl")
    cmd = [sys.executable, "-m", "onward", "worker", "--db", db, "--exit-when-idle"]
    cmd += ["--poll", "0.05", "--concurrency", str(concurrency)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with Backends(db.split("?")[0], app) as backends:
        start = time.perf_counter()
        if subprocess.run(cmd, cwd=wd, env=env, stderr=subprocess.DEVNULL).returncode != 0:
            raise SystemExit("the worker failed")
        wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, backends


def concurrency_row(concurrency: int, steps: int, io: float) -> dict[str, float]:
    runs = max(16, 2 * concurrency)
    with pg_schema() as db, tempfile.TemporaryDirectory(prefix="onward-fleet-") as wd:
        with Onward(db, model=None) as made:
            made.store  # noqa: B018  (made before anything is measured)
        idle_wall, idle_cpu, idle = worker_round(db, wd, concurrency, f"bench-idle-{concurrency}")
        with Onward(db, model=None) as ow:
            tids = [ow.submit(plan=io_plan(steps, io), workdir=wd) for _ in range(runs)]
        wall, cpu, busy = worker_round(db, wd, concurrency, f"bench-fleet-{concurrency}")
        with Onward(db, model=None) as ow:
            if any(ow.get(t).status is not RunStatus.DONE for t in tids):
                raise SystemExit("some runs did not finish")
        calls = [json.loads(x) for x in (Path(wd) / "calls.jsonl").read_text().splitlines()]
    span = max(c["t"] for c in calls) - min(c["t"] for c in calls)
    ideal = math.ceil(runs / concurrency) * steps * io
    n = runs * steps
    return {
        "concurrency": concurrency,
        "runs": runs,
        "wall_over_ideal": span / ideal,
        "wall_s": wall,
        "startup_s": idle_wall,
        "client_ms_per_step": 1000 * (cpu - idle_cpu) / n,
        "postgres_ms_per_step": 1000 * (busy.cpu - idle.cpu) / n,
        "peak_connections": busy.peak,
    }


def procs_round(
    cmds: list[list[str]], wd: str, app: str, database: str | None = None
) -> tuple[float, float, Backends, str]:
    """(wall s, CPU s of the processes, their backends, their stdout) of ``cmds`` run at
    once, each with ``PGAPPNAME`` ``app`` (``database``: their backends are that database's
    connections)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ONWARD_", "OPENAI_"))}
    env |= {"ONWARD_BLOCK_MODEL_REQUESTS": "1", "PGAPPNAME": app}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = ""
    with Backends(PG_URL, app, database) as backends:
        start = time.perf_counter()
        procs = [
            subprocess.Popen(
                cmd, cwd=wd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
            for cmd in cmds
        ]
        for p in procs:
            out += p.communicate(timeout=900)[0]
            if p.returncode != 0:
                raise SystemExit(f"{cmds[0][:4]} failed ({p.returncode})")
        wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, backends, out


def span_of(logs: list[Path]) -> float:
    """Seconds from the first logged step's start to the last one's end."""
    times = [
        json.loads(line)["t"]
        for log in logs
        if log.exists()
        for line in log.read_text().splitlines()
    ]
    return max(times) - min(times)


def submitted_cpu(out: str) -> float:
    """CPU seconds a child spent submitting (its JSON line), left out of its share."""
    return sum(json.loads(x).get("submit_cpu", 0.0) for x in out.splitlines() if x[:1] == "{")


def measured(
    system: str,
    c: int,
    runs: int,
    steps: int,
    io: float,
    rounds: tuple[tuple[float, float, Backends, str], tuple[float, float, Backends, str]],
    logs: list[Path],
) -> dict[str, Any]:
    """A table row from an idle round (start-up) and a busy one."""
    (idle_wall, idle_cpu, idle, _), (wall, cpu, busy, out) = rounds
    n = runs * steps
    ideal = math.ceil(runs / c) * steps * io
    return {
        "system": system,
        "concurrency": c,
        "runs": runs,
        "wall_over_ideal": span_of(logs) / ideal,
        "wall_s": wall,
        "startup_s": idle_wall,
        "client_ms_per_step": 1000 * (cpu - idle_cpu - submitted_cpu(out)) / n,
        "postgres_ms_per_step": 1000 * (busy.cpu - idle.cpu) / n,
        "peak_connections": busy.peak,
    }


def onward_row(c: int, workers: int, runs: int, steps: int, io: float) -> dict[str, Any]:
    """onward: ``workers`` processes sharing concurrency ``c``."""
    share = [c // workers + (i < c % workers) for i in range(workers)]
    with pg_schema() as db, tempfile.TemporaryDirectory(prefix="onward-fleet-") as wd:
        with Onward(db, model=None) as made:
            made.store  # noqa: B018  (made before anything is measured)
        cmd = [sys.executable, "-m", "onward", "worker", "--db", db, "--exit-when-idle"]
        cmd += ["--poll", "0.05"]
        logs = [Path(wd) / f"calls-{i}.jsonl" for i in range(workers)]

        def cmds(tag: str) -> list[list[str]]:
            return [
                [
                    "env",
                    f"ONWARD_EXECUTION_LOG={Path(wd) / f'{tag}-{i}.jsonl'}",
                    *cmd,
                    "--concurrency",
                    str(k),
                ]
                for i, k in enumerate(share)
            ]

        idle = procs_round(cmds("idle"), wd, f"cmp-onward-idle-{c}-{workers}")
        with Onward(db, model=None) as ow:
            tids = [ow.submit(plan=io_plan(steps, io), workdir=wd) for _ in range(runs)]
        busy = procs_round(cmds("calls"), wd, f"cmp-onward-{c}-{workers}")
        with Onward(db, model=None) as ow:
            if any(ow.get(t).status is not RunStatus.DONE for t in tids):
                raise SystemExit("some onward runs did not finish")
        name = "onward, 1 worker" if workers == 1 else f"onward, {workers} workers"
        return measured(name, c, runs, steps, io, (idle, busy), logs)


def child_row(system: str, c: int, runs: int, steps: int, io: float, pool: int) -> dict[str, Any]:
    """DBOS or plain LangGraph in a child process of this script, on a fresh database."""
    from _dbos import pg_database

    with pg_database() as db, tempfile.TemporaryDirectory(prefix="onward-fleet-") as wd:
        log = Path(wd) / "calls.jsonl"
        cmd = [sys.executable, __file__, "--child", system, "--db", db, "--concurrency", str(c)]
        cmd += ["--steps", str(steps), "--io", str(io), "--lg-pool", str(pool)]
        dbname = db.rsplit("/", 1)[1]
        idle_cmd = [*cmd, "--runs", "0", "--log", str(log)]
        procs_round([idle_cmd], wd, f"cmp-{system}-w-{c}")  # its tables made, not measured
        idle = procs_round([idle_cmd], wd, f"cmp-{system}-i-{c}", dbname)
        log.unlink(missing_ok=True)
        busy_cmd = [*cmd, "--runs", str(runs), "--log", str(log)]
        busy = procs_round([busy_cmd], wd, f"cmp-{system}-{c}", dbname)
        name = "DBOS queue" if system == "dbos" else f"LangGraph + PostgresSaver (pool {pool})"
        return measured(name, c, runs, steps, io, (idle, busy), [log])


def langgraph_child(
    url: str, concurrency: int, runs: int, steps: int, io: float, log: str, pool_size: int
) -> None:
    """Plain LangGraph: ``runs`` graphs of ``steps`` waits, ``concurrency`` at a time, each
    checkpointed by ``PostgresSaver`` on one ``psycopg_pool`` pool (``runs`` 0: start-up)."""
    from concurrent.futures import ThreadPoolExecutor
    from typing import TypedDict

    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    class State(TypedDict):
        n: int

    def wait(state: State) -> State:
        start = time.time()
        time.sleep(io)
        with open(log, "a") as out:
            out.write(json.dumps({"phase": "start", "t": start}) + "\n")
            out.write(json.dumps({"phase": "end", "t": time.time()}) + "\n")
        return {"n": state["n"] + 1}

    builder = StateGraph(State)
    names = [f"io{i}" for i in range(steps)]
    for a, b in zip([START, *names], [*names, END], strict=True):
        if b != END:
            builder.add_node(b, wait)
        builder.add_edge(a, b)
    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    with ConnectionPool(url, max_size=pool_size, kwargs=kwargs) as pool:
        saver = PostgresSaver(pool)  # type: ignore[arg-type]
        saver.setup()
        graph = builder.compile(checkpointer=saver)

        def one(i: int) -> int:
            result = graph.invoke({"n": 0}, {"configurable": {"thread_id": f"run-{i}"}})
            return int(result["n"])

        with ThreadPoolExecutor(max(1, concurrency)) as ex:
            done = list(ex.map(one, range(runs)))
    if done != [steps] * runs:
        raise SystemExit("some LangGraph runs did not finish")


def compare(levels: list[int], steps: int, io: float, pool: int, json_path: Path | None) -> int:
    console = Console(width=150)
    rows: list[dict[str, Any]] = []
    for c in levels:
        runs = max(16, 2 * c)
        for system in ("onward", "onward2", "dbos", "langgraph"):
            if system == "onward2" and c < 2:
                continue
            with console.status(f"{system} at concurrency {c}"):
                if system.startswith("onward"):
                    workers = 2 if system == "onward2" else 1
                    rows.append(onward_row(c, workers, runs, steps, io))
                else:
                    rows.append(child_row(system, c, runs, steps, io, pool))
    table = Table(title=f"runs of {steps} × {io} s I/O steps on one Postgres, side by side")
    heads = ("system", "C", "runs", "wall ÷ ideal", "start-up s", "client ms/step")
    for col in (*heads, "Postgres ms/step", "client+PG ms/step", "peak conns"):
        table.add_column(col, justify="right")
    for r in rows:
        total = r["client_ms_per_step"] + r["postgres_ms_per_step"]
        table.add_row(
            r["system"],
            str(r["concurrency"]),
            str(r["runs"]),
            f"{r['wall_over_ideal']:.2f}",
            f"{r['startup_s']:.2f}",
            f"{r['client_ms_per_step']:.1f}",
            f"{r['postgres_ms_per_step']:.1f}",
            f"{total:.1f}",
            str(r["peak_connections"]),
        )
    console.print(table)
    for c in levels:
        mine = next(r for r in rows if r["concurrency"] == c and r["system"] == "onward, 1 worker")
        dbos = next(r for r in rows if r["concurrency"] == c and r["system"] == "DBOS queue")
        cpu = (mine["client_ms_per_step"] + mine["postgres_ms_per_step"]) / max(
            1e-9, dbos["client_ms_per_step"] + dbos["postgres_ms_per_step"]
        )
        wall = mine["wall_over_ideal"] / dbos["wall_over_ideal"]
        console.print(
            f"C={c}: onward ÷ DBOS  wall÷ideal {wall:.2f}"
            f"  client+PG CPU/step {cpu:.2f}  peak connections "
            f"{mine['peak_connections']}/{dbos['peak_connections']}"
            f"  start-up {mine['startup_s'] / dbos['startup_s']:.2f}"
        )
    pool_size = int(os.environ.get("ONWARD_PG_POOL_SIZE", 10))
    console.print(f"onward pool: ONWARD_PG_POOL_SIZE={pool_size}")
    console.print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")
    console.print(f"durability (read back): {pg_durability()}")
    goals = targets(rows, pool_size)
    for g in goals:
        met = "yes" if g["met"] else "NO"
        console.print(
            f"{g['measure']}: {g['onward']} vs {g['baseline']} (target {g['target']}): {met}"
        )
    write_json(json_path, goals)
    return 0


def targets(rows: list[dict[str, Any]], pool_size: int) -> list[dict[str, Any]]:
    """Issue 37's targets at concurrency 32 and 64, in run_all.py's row shape (every run
    finished, or the bench stopped before this)."""
    goals: list[dict[str, Any]] = []
    for c in sorted({r["concurrency"] for r in rows if r["concurrency"] >= 32}):
        at = {r["system"]: r for r in rows if r["concurrency"] == c}
        mine, dbos = at["onward, 1 worker"], at["DBOS queue"]
        cpu = mine["client_ms_per_step"] + mine["postgres_ms_per_step"]
        dcpu = dbos["client_ms_per_step"] + dbos["postgres_ms_per_step"]
        peak = mine["peak_connections"]  # (two workers' row: both processes together)
        goals += [
            {
                "bench": "fleet.py --compare",
                "measure": f"wall ÷ ideal, one worker at C={c} ({mine['runs']} runs, all done)",
                "onward": round(mine["wall_over_ideal"], 2),
                "baseline": f"DBOS {dbos['wall_over_ideal']:.2f}",
                "ratio": round(mine["wall_over_ideal"], 2),
                "target": "≤ 1.25",
                "met": mine["wall_over_ideal"] <= 1.25,
            },
            {
                "bench": "fleet.py --compare",
                "measure": f"client + Postgres CPU ms per step ÷ DBOS at C={c}",
                "onward": round(cpu, 1),
                "baseline": f"DBOS {dcpu:.1f}",
                "ratio": round(cpu / max(dcpu, 1e-9), 2),
                "target": "≤ 1.0",
                "met": cpu <= dcpu,
            },
            {
                "bench": "fleet.py --compare",
                "measure": f"peak connections per process at C={c} (pool {pool_size})",
                "onward": peak,
                "baseline": f"DBOS {dbos['peak_connections']}",
                "ratio": round(peak / max(dbos["peak_connections"], 1), 2),
                "target": f"≤ {pool_size} and ≤ DBOS",
                "met": peak <= pool_size and peak <= dbos["peak_connections"],
            },
        ]
    return goals


def concurrency_sweep(levels: list[int], steps: int, io: float, json_path: Path | None) -> int:
    console = Console()
    rows = []
    for c in levels:
        with console.status(f"one worker at --concurrency {c}"):
            rows.append(concurrency_row(c, steps, io))
    table = Table(title=f"one worker, runs of {steps} × {io} s I/O steps, Postgres")
    heads = ("concurrency", "runs", "wall ÷ ideal", "start-up s", "client ms/step")
    for col in (*heads, "Postgres ms/step", "peak connections"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["concurrency"]),
            str(r["runs"]),
            f"{r['wall_over_ideal']:.2f}",
            f"{r['startup_s']:.2f}",
            f"{r['client_ms_per_step']:.1f}",
            f"{r['postgres_ms_per_step']:.1f}",
            str(r["peak_connections"]),
        )
    console.print(table)
    console.print(f"pool size: ONWARD_PG_POOL_SIZE={os.environ.get('ONWARD_PG_POOL_SIZE', 10)}")
    console.print(f"durability (read back): {pg_durability()}")
    write_json(json_path, [{"bench": "fleet.py --concurrency", **r} for r in rows])
    return 0


def run_child(args: argparse.Namespace) -> int:
    """``--child``: DBOS or LangGraph draining ``--runs`` runs at ``--concurrency``."""
    c, runs = int(args.concurrency), args.runs
    if args.child == "dbos":
        from _dbos import drain_queue

        drain_queue(args.db, c, runs, args.steps, args.io, args.log)
    else:
        langgraph_child(args.db, c, runs, args.steps, args.io, args.log, args.lg_pool)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=24)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--io", type=float, default=0.2, help="seconds each step waits")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--json", type=Path, help="also write the ratios here (run_all.py)")
    parser.add_argument(
        "--concurrency", help="one worker at these concurrencies instead (e.g. 1,8,32)"
    )
    parser.add_argument(
        "--compare", help="onward, DBOS and LangGraph side by side at these (e.g. 1,8,32,64)"
    )
    parser.add_argument("--lg-pool", type=int, default=10, help="LangGraph's pool size")
    parser.add_argument("--child", choices=["dbos", "langgraph"], help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--log", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return run_child(args)
    if args.compare:
        levels = [int(c) for c in args.compare.split(",")]
        io = 0.5 if args.io == 0.2 else args.io
        return compare(levels, args.steps, io, args.lg_pool, args.json)
    if args.concurrency:
        levels = [int(c) for c in args.concurrency.split(",")]
        return concurrency_sweep(levels, args.steps, 0.5 if args.io == 0.2 else args.io, args.json)
    console = Console()
    seconds: dict[int, list[float]] = {1: [], 2: []}
    for r in range(args.rounds):
        for workers in (1, 2) if r % 2 == 0 else (2, 1):
            with console.status(f"round {r + 1}/{args.rounds}: {workers} worker(s)"):
                seconds[workers].append(
                    one_round(workers, args.runs, args.steps, args.io, args.backend)
                )
    per_minute = {w: args.runs * 60 / statistics.median(v) for w, v in seconds.items()}
    table = Table(
        title=f"{args.runs} runs of {args.steps} × {args.io} s I/O steps on {args.backend}, "
        f"{args.rounds} rounds"
    )
    for col in ("workers", "median s", "min s", "max s", "runs / min"):
        table.add_column(col, justify="right")
    for w, v in seconds.items():
        table.add_row(
            str(w),
            f"{statistics.median(v):.2f}",
            f"{min(v):.2f}",
            f"{max(v):.2f}",
            f"{per_minute[w]:.1f}",
        )
    console.print(table)
    ratio = per_minute[2] / per_minute[1]
    console.print(f"2 workers ÷ 1 worker: {ratio:.2f}× runs per minute (target ≥ 1.7)")
    write_json(
        args.json,
        [
            {
                "bench": "fleet.py",
                "measure": f"runs per minute, 2 workers vs 1 ({args.backend}, {args.runs} runs "
                f"of {args.steps} × {args.io} s I/O steps)",
                "onward": round(per_minute[2], 1),
                "baseline": f"1 worker: {per_minute[1]:.1f}",
                "ratio": round(ratio, 2),
                "target": "≥ 1.7",
                "met": ratio >= 1.7,
            }
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
