"""Helpers shared by several test modules, moved out of
tests/store/test_checkpointer_conformance.py: OPTIONAL, SYNC, onward_saver, own_saver,
report, threaded."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

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
