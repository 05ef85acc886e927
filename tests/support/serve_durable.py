"""Helpers shared by several test modules, moved out of tests/server/test_serve_durable.py:
FAST_LEASES, servers, sse."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.serve import start_server

FAST_LEASES = {"ONWARD_LEASE_TTL": "3s", "ONWARD_HEARTBEAT": "1s"}
"""A dead driver's lease expires in seconds, so recovery (and workers) take over soon."""


@contextmanager
def servers(db_url: str, workdir: Path, n: int, *args: str, **env: str) -> Iterator[list[Any]]:
    """``n`` ``onward serve`` processes on one store: [(process, url), ...]; each is
    stopped at the end (already killed ones are left)."""
    started = []
    try:
        for _ in range(n):
            started.append(start_server(db_url, workdir, *args, **{**FAST_LEASES, **env}))
        yield started
    finally:
        for proc, _url in started:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(20)


def sse(url: str, path: str, last_event_id: str | None = None, limit: int = 0) -> list[Any]:
    """A run's stream read with httpx: [(id, event, data)]; ``limit``: stop after that
    many events (the client goes away)."""
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    got: list[Any] = []
    with (
        httpx.Client(base_url=url, timeout=60) as http,
        http.stream("GET", path, headers=headers) as res,
    ):
        assert res.status_code == 200, res.read()
        block: dict[str, str] = {}
        for line in res.iter_lines():
            if line.startswith(("id: ", "event: ", "data: ")):
                key, _sep, value = line.partition(": ")
                block[key] = value
            if not line and "event" in block:
                got.append((block.get("id"), block["event"], json.loads(block.get("data", "null"))))
                block = {}
                if limit and len(got) >= limit:
                    break
    return got


def fed_and_followed(
    feed: Any, kept: list[int], after: int | None = None
) -> tuple[list[int], list[int]]:
    """Feed ``feed`` 50 ``updates`` and its end from a thread of its own while a reader
    follows it (after item ``after``): the numbers the reader got, and those it got before
    the feed had kept them (none, if readers see only what was kept)."""
    import asyncio
    import threading

    from onward.serve.feed import DONE

    seen_unkept: list[int] = []

    async def follow() -> list[int]:
        got = []
        async for number, _item in feed.follow(after) if after is not None else feed.follow():
            if number not in kept:
                seen_unkept.append(number)
            got.append(number)
        return got

    def drive() -> None:
        for i in range(50):
            feed.put(("updates", i))
        feed.put(DONE)

    threading.Thread(target=drive).start()
    return asyncio.run(follow()), seen_unkept
