"""The systems the benches compare, each run the same way: N no-op steps on a fresh store.

Used by the child processes of ``commits.py`` (which count commits and fsyncs, and time
runs); ``overhead.py`` drives them. Every runner opens its store outside the window,
runs inside it and reads its durability settings back from its own live connection.

* ``onward``: a chain of N ``noop`` plan steps, ``Onward(db).run(plan=...)``. SQLite: WAL,
  ``synchronous=NORMAL``, or ``FULL`` with ``ONWARD_FSYNC=1`` (which also fsyncs artifact
  files); Postgres: the server's defaults.
* ``langgraph``: ``StateGraph`` + LangGraph's own ``SqliteSaver`` / ``PostgresSaver`` with
  ``durability="sync"``: one node increments a counter, a conditional edge loops back
  until it reaches N (one superstep and one checkpoint per step). SQLite: WAL (the
  saver's ``setup()``), ``synchronous`` as onward's; Postgres: autocommit connection, as
  LangGraph documents it.
* ``langgraph-none``: the same loop without a checkpointer (LangGraph's own cost).
* ``langgraph-shape-none``: onward's graph shape (below) without a checkpointer: what
  LangGraph's loop itself spends per plan step, saving nothing. Every onward step pays it;
  the rest of onward's step is its own (nodes, savers, serializer, the commit).
* ``langgraph-shape``: LangGraph's own saver, as ``langgraph``, running the *shape* of
  onward's graph with no-op nodes: a routing function ``Send``s each step to ``execute``,
  an edge leads to ``verify``, whose routing function sends the next one (two supersteps
  per step), over as many channels as onward's ``RunState`` has. What LangGraph itself
  spends on that shape at the same durability: the floor of onward's per-step cost while
  verify is a node of its own (DESIGN.md, "The graph").
* ``dbos``: a ``@DBOS.workflow`` calling a no-op ``@DBOS.step`` N times; SQLite: WAL and
  ``synchronous`` as onward's (set on DBOS's engine, see ``_dbos.py``); Postgres: a fresh
  database's ``dbos`` schema at the server's defaults.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypedDict

from _common import SYNC_NAMES, any_size, chain_plan

SYSTEMS = (
    "onward",
    "langgraph",
    "langgraph-shape",
    "langgraph-none",
    "langgraph-shape-none",
    "dbos",
)

Window = Callable[[], AbstractContextManager["Clock"]]
"""Opens the counted window (markers, commit counter) and times what runs in it."""


class Clock:
    """Wall and CPU seconds between :meth:`start` and :meth:`stop`."""

    seconds = cpu = 0.0

    def start(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def stop(self) -> None:
        self.seconds = time.perf_counter() - self._wall
        self.cpu = time.process_time() - self._cpu


def synchronous() -> str:
    """The SQLite ``synchronous`` every system gets: onward's for this environment."""
    return "FULL" if os.environ.get("ONWARD_FSYNC", "0") not in ("", "0") else "NORMAL"


def sqlite_settings(conn: sqlite3.Connection) -> dict[str, str]:
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    return {"journal_mode": str(journal), "synchronous": SYNC_NAMES.get(sync, str(sync))}


def pg_settings(conn: Any) -> dict[str, str]:
    row = conn.execute("SHOW synchronous_commit").fetchone()
    value = row["synchronous_commit"] if isinstance(row, dict) else row[0]
    return {"synchronous_commit": str(value)}


def run(system: str, db: str, workdir: Path, steps: int, window: Window) -> dict[str, str]:
    """Run ``steps`` no-op steps of ``system`` on ``db`` ("sqlite": a new file in
    ``workdir``; else a Postgres URL); returns the settings read back."""
    runner = {
        "onward": _onward,
        "langgraph": _langgraph,
        "langgraph-shape": _langgraph_shape,
        "langgraph-none": _langgraph_none,
        "langgraph-shape-none": _langgraph_shape_none,
        "dbos": _dbos,
    }[system]
    return runner(db, workdir, steps, window)


def _onward(db: str, workdir: Path, steps: int, window: Window) -> dict[str, str]:
    from onward import Onward

    url = f"sqlite:///{workdir / 'onward.db'}" if db == "sqlite" else db
    plan = chain_plan(steps)
    ow = Onward(url, model=None)  # opened outside the window; run and close inside it
    with window() as clock, ow:
        store: Any = ow.store
        settings = sqlite_settings(store.conn) if db == "sqlite" else pg_settings(store.connect())
        clock.start()
        view = ow.run(plan=plan, workdir=workdir, **any_size())
        clock.stop()
    status = getattr(view.status, "value", view.status)
    done = sum(getattr(s.status, "value", s.status) == "done" for s in view.steps)
    if status != "done" or done != steps:
        raise RuntimeError(f"onward run ended {status} with {done}/{steps} steps done")
    return settings


class CountState(TypedDict):
    count: int


def counter_graph(n: int, checkpointer: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    def step(state: CountState) -> dict[str, Any]:
        return {"count": state["count"] + 1}

    def route(state: CountState) -> str:
        return "step" if state["count"] < n else END

    g: StateGraph[Any] = StateGraph(CountState)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", route, ["step", END])
    return g.compile(checkpointer=checkpointer)


def shape_graph(n: int, checkpointer: Any, *, fused: bool = False) -> Any:
    """onward's graph shape with no-op nodes (see ``langgraph-shape`` above); ``fused``:
    execute and verify as one node, one superstep a step (bench/supersteps.py)."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    from onward.model.state import RunState

    # One int channel per RunState field ("count" is one of them): the channels LangGraph
    # versions, checks for updates and snapshots every superstep.
    others = [f"c{i}" for i in range(len(RunState.model_fields) - 1)]
    state = TypedDict("ShapeState", {"count": int, **dict.fromkeys(others, int)})  # type: ignore[misc]

    def schedule(s: dict[str, Any]) -> Any:
        return [Send("execute", s["count"])] if s["count"] < n else END

    def execute(step: int) -> dict[str, Any]:
        return {"c0": step}  # the produced output (onward: the step's record)

    def verify(s: dict[str, Any]) -> dict[str, Any]:
        return {"count": s["count"] + 1}  # done

    def execute_and_verify(step: int) -> dict[str, Any]:
        return {"c0": step, "count": step + 1}

    g: StateGraph[Any] = StateGraph(state)
    g.add_node("plan", lambda s: {"count": 0})
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", schedule, ["execute", END])
    if fused:
        g.add_node("execute", execute_and_verify)
        g.add_conditional_edges("execute", schedule, ["execute", END])
    else:
        g.add_node("execute", execute)
        g.add_node("verify", verify)
        g.add_edge("execute", "verify")
        g.add_conditional_edges("verify", schedule, ["execute", END])
    return g.compile(checkpointer=checkpointer)


def _invoke(graph: Any, n: int, durability: str | None, clock: Clock) -> None:
    config: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": 2 * n + 10}
    clock.start()
    out = graph.invoke({"count": 0}, config, durability=durability)
    clock.stop()
    if out["count"] != n:
        raise RuntimeError(f"LangGraph run ended at count {out['count']}, expected {n}")


def _langgraph(
    db: str, workdir: Path, steps: int, window: Window, build: Any = counter_graph
) -> dict[str, str]:
    if db != "sqlite":
        return _langgraph_pg(db, steps, window, build)
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(workdir / "bare.db", check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()  # journal_mode=WAL
        conn.execute(f"PRAGMA synchronous={synchronous()}")
        graph = build(steps, saver)
        settings = sqlite_settings(conn)
        with window() as clock:
            _invoke(graph, steps, "sync", clock)
    finally:
        conn.close()
    return settings


def _langgraph_shape(db: str, workdir: Path, steps: int, window: Window) -> dict[str, str]:
    return _langgraph(db, workdir, steps, window, shape_graph)


def _langgraph_pg(url: str, steps: int, window: Window, build: Any) -> dict[str, str]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    kwargs: Any = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    with psycopg.connect(url, **kwargs) as conn:
        saver = PostgresSaver(conn)
        saver.setup()
        graph = build(steps, saver)
        settings = pg_settings(conn)
        with window() as clock:
            _invoke(graph, steps, "sync", clock)
    return settings


def _langgraph_none(
    db: str, workdir: Path, steps: int, window: Window, build: Any = counter_graph
) -> dict[str, str]:
    # No durability argument: LangGraph 1.2 warns that it has no effect without a
    # checkpointer, then fails on the missing checkpoint future when it is "sync".
    graph = build(steps, None)
    with window() as clock:
        _invoke(graph, steps, None, clock)
    return {}


def _langgraph_shape_none(db: str, workdir: Path, steps: int, window: Window) -> dict[str, str]:
    return _langgraph_none(db, workdir, steps, window, shape_graph)


def _dbos(db: str, workdir: Path, steps: int, window: Window) -> dict[str, str]:
    import _dbos

    url = f"sqlite:///{workdir / 'dbos.sqlite'}" if db == "sqlite" else db
    with _dbos.launched(url, synchronous()):
        settings = _dbos.live_settings()
        with window() as clock:
            clock.start()
            total = _dbos.noop_chain(steps)
            clock.stop()
        after = _dbos.live_settings()
    if total != steps * (steps - 1) // 2:
        raise RuntimeError("DBOS workflow returned a wrong total")
    if after != settings:
        raise RuntimeError(f"DBOS settings changed during the run: {settings} → {after}")
    return settings
