"""One reader of a run (onward.observe.reading), whatever face shows it.

``Onward.get``, the notebook (which shows the view ``Onward.get`` returns) and the web
page's run view (``GET /onward/runs/{id}``) give the same view as LangGraph's own read
(onward.client.views on ``graph.get_state``), for a run waiting at a question, one with a
step running, a cancelled run, a failed one and a finished one. Where the light read is exact
(everything but the running run) ``Onward.get`` does not load LangGraph's state at all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from onward import Onward, Plan, PlanStep, Registry, RunPolicy, RunStatus, RunView, tool
from onward.client import views
from onward.notebook.html import run_html
from onward.serve.app import create_app

VARYING = {"heartbeat_at"}
"""A live driver beats while the views are read: the one field that may differ."""


class Held:
    """A tool that runs until the test lets it finish."""

    def __init__(self) -> None:
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self) -> dict[str, bool]:
        self.started.set()
        assert self.release.wait(60), "the test did not release the step"
        return {"held": True}


@pytest.fixture
def held() -> Held:
    return Held()


@pytest.fixture
def registry(held: Held) -> Registry:
    tools = Registry()

    @tool(name="noop", registry=tools)
    def noop() -> dict[str, bool]:
        return {}

    @tool(name="fail", registry=tools)
    def fail() -> dict[str, bool]:
        raise RuntimeError("this step always fails")

    @tool(name="hold", registry=tools)
    def hold() -> dict[str, bool]:
        return held()

    return tools


class GraphReads:
    """The compiled graph, counting the reads of its state (``get_state``)."""

    def __init__(self, graph: Any) -> None:
        self.graph, self.reads = graph, 0

    def get_state(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return self.graph.get_state(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.graph, name)


@pytest.fixture
def reader(db_url: str, registry: Registry) -> Iterator[tuple[Onward, GraphReads]]:
    with Onward(db_url, registry=registry, model=None) as ow:
        counted = GraphReads(ow.graph)
        ow._graph = counted  # type: ignore[assignment]
        yield ow, counted


def plan(*tools: str) -> Plan:
    ids = [f"s{i}" for i in range(len(tools))]
    return Plan(
        steps=[
            PlanStep(id=i, tool=t, depends_on=ids[:n][-1:])
            for n, (i, t) in enumerate(zip(ids, tools, strict=True))
        ]
    )


def dumped(view: RunView) -> dict[str, Any]:
    return {k: v for k, v in view.model_dump(mode="json").items() if k not in VARYING}


def through_langgraph(reader: tuple[Onward, GraphReads], thread_id: str) -> RunView:
    """The view LangGraph's own read gives (``graph.get_state``, onward.client.views)."""
    ow, graph = reader
    snap = graph.graph.get_state(views.config(thread_id))
    return views.view(ow.store, thread_id, views.row(ow.store, thread_id), snap)


def assert_one_view(reader: tuple[Onward, GraphReads], page: TestClient, thread_id: str) -> RunView:
    """Every face's view of the run is LangGraph's; returns ``Onward.get``'s. A run that
    is driven meanwhile is read again until it held still across the reads."""
    ow, _ = reader
    deadline = time.monotonic() + 60
    while True:
        expected = through_langgraph(reader, thread_id)
        got = ow.get(thread_id)
        served = page.get(f"/onward/runs/{thread_id}")
        if dumped(through_langgraph(reader, thread_id)) == dumped(expected):
            break
        assert time.monotonic() < deadline, "the run never held still"
    assert dumped(got) == dumped(expected)
    assert run_html(got) == run_html(expected.model_copy(update={"heartbeat_at": got.heartbeat_at}))
    assert served.status_code == 200, served.text
    assert {k: v for k, v in served.json()["view"].items() if k not in VARYING} == dumped(got)
    return got


@pytest.fixture
def page(db_url: str, workdir: Path) -> Iterator[TestClient]:
    with TestClient(create_app(db_url, workdir=workdir, model=None)) as client:
        yield client


def test_waiting_cancelled_failed_and_finished_runs_read_the_same_everywhere_without_langgraph(
    reader: tuple[Onward, GraphReads], page: TestClient, workdir: Path
) -> None:
    ow, graph = reader
    done = ow.run(plan=plan("noop", "noop"), workdir=workdir).thread_id
    waiting = ow.run(plan=plan("noop"), workdir=workdir, policy=RunPolicy(approve_plan=True))
    cancelled = ow.run(plan=plan("noop"), workdir=workdir, policy=RunPolicy(approve_plan=True))
    ow.cancel(cancelled.thread_id, reason="not needed")
    failed = ow.run(plan=plan("fail"), workdir=workdir, policy=RunPolicy(escalate_failures=False))
    wave = Plan(steps=[PlanStep(id="a", tool="noop"), PlanStep(id="b", tool="noop")])
    batch = ow.run(plan=wave, workdir=workdir, policy=RunPolicy(approve_tools={"noop"}))
    expected = {
        done: RunStatus.DONE,
        waiting.thread_id: RunStatus.WAITING_FOR_HUMAN,
        cancelled.thread_id: RunStatus.CANCELLED,
        failed.thread_id: RunStatus.FAILED,
        batch.thread_id: RunStatus.WAITING_FOR_HUMAN,
    }
    for thread_id, status in expected.items():
        graph.reads = 0
        got = ow.get(thread_id)
        assert (got.status, graph.reads) == (status, 0)
        assert assert_one_view(reader, page, thread_id) == got
    assert ow.get(waiting.thread_id).pending
    assert ow.pending(waiting.thread_id) == ow.get(waiting.thread_id).pending
    assert ow.get(done).report
    assert len(ow.get(batch.thread_id).pending) == 2  # a wave's questions: one batch
    assert [p.thread_id for p in ow.inbox()] == [waiting.thread_id, *[batch.thread_id] * 2]
    assert graph.reads == 0


def test_a_run_with_a_step_running_reads_the_same_everywhere_through_langgraph(
    db_url: str,
    registry: Registry,
    held: Held,
    reader: tuple[Onward, GraphReads],
    page: TestClient,
    workdir: Path,
) -> None:
    ow, graph = reader
    with Onward(db_url, registry=registry, model=None) as driver:
        thread_id = driver.start(plan=plan("noop", "hold"), workdir=workdir)
        drive = threading.Thread(target=driver.drive, args=(thread_id,))
        drive.start()
        try:
            assert held.started.wait(60), "the step did not start"
            graph.reads = 0
            got = assert_one_view(reader, page, thread_id)
            assert graph.reads > 0  # what a running run pauses before is LangGraph's to say
            assert got.status is RunStatus.RUNNING
            assert got.steps[-1].status.value != "done"
        finally:
            held.release.set()
            drive.join(60)
    assert ow.get(thread_id).status is RunStatus.DONE
