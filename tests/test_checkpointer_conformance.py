"""LangGraph's own checkpointer conformance suite (``langgraph-checkpoint-conformance``) on
onward's savers, plain and encrypted, on SQLite and Postgres, beside LangGraph's own
``SqliteSaver`` / ``PostgresSaver`` on the same database in the same run.

The suite calls the async methods; onward's savers (like the sync savers they extend) are
synchronous, so both sides run through the same adapter: each async method the suite
detects is the saver's sync method in a worker thread (``asyncio.to_thread``), and only
the methods the saver implements are offered. onward must pass every capability it
offers and everything LangGraph's own saver passes."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import CapabilityReport

from onward.store.database import Store

SYNC = ("put", "put_writes", "get_tuple", "list", "delete_thread")
OPTIONAL = ("delete_for_runs", "copy_thread", "prune")


def threaded(saver: BaseCheckpointSaver[Any]) -> BaseCheckpointSaver[Any]:
    """``saver`` with ``a<method>`` = its sync method in a thread, for every method it has."""
    cls = type(saver)
    names = [*SYNC, *(n for n in OPTIONAL if getattr(cls, n, None) is not None)]
    names = [n for n in names if getattr(cls, n) is not getattr(BaseCheckpointSaver, n, None)]

    def make(name: str) -> Any:
        method = getattr(saver, name)
        if name == "list":

            async def alist(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
                for item in await asyncio.to_thread(lambda: list(method(*args, **kwargs))):
                    yield item

            return alist

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(method, *args, **kwargs)

        return call

    attrs = {f"a{n}": staticmethod(make(n)) for n in names}
    attrs |= {n: staticmethod(getattr(saver, n)) for n in names}
    attrs["get_next_version"] = staticmethod(saver.get_next_version)
    adapter = type(f"Threaded{cls.__name__}", (BaseCheckpointSaver,), attrs)
    out: BaseCheckpointSaver[Any] = adapter(serde=saver.serde)
    return out


def report(
    name: str, open_saver: Callable[[], AbstractContextManager[BaseCheckpointSaver[Any]]]
) -> CapabilityReport:
    @checkpointer_test(name=name)
    async def factory() -> AsyncGenerator[BaseCheckpointSaver[Any], None]:
        with open_saver() as saver:
            yield threaded(saver)

    return asyncio.run(validate(factory))


@contextmanager
def onward_saver(url: str) -> Iterator[BaseCheckpointSaver[Any]]:
    with Store(url) as store:
        yield store.saver


@contextmanager
def own_saver(url: str) -> Iterator[BaseCheckpointSaver[Any]]:
    if url.startswith("sqlite"):
        from langgraph.checkpoint.sqlite import SqliteSaver

        path = Path(url.removeprefix("sqlite:///")).with_name("langgraph.db")
        path.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(path, check_same_thread=False) as conn:
            saver = SqliteSaver(conn)
            saver.setup()
            yield saver
        return
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        yield saver


def passed(r: CapabilityReport) -> set[str]:
    return {cap for cap, res in r.results.items() if res.detected and res.passed is True}


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_onward_savers_pass_langgraphs_conformance_suite_as_its_own_savers_do(
    db_url: str, encrypted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if encrypted:
        monkeypatch.setenv("ONWARD_AES_KEY", "k" * 32)
    ours = report("onward", lambda: onward_saver(db_url))
    theirs = report("langgraph", lambda: own_saver(db_url))
    failures = {cap: res.failures for cap, res in ours.results.items() if res.failures}
    assert ours.passed_all(), failures
    assert passed(theirs) <= passed(ours), (passed(theirs), passed(ours))
    assert {"put", "put_writes", "get_tuple", "list", "delete_thread"} <= passed(ours)
    total = sum(r.tests_passed for r in ours.results.values())
    assert total >= sum(r.tests_passed for r in theirs.results.values())
