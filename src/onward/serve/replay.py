"""A run's stream read back from the store: after a restart, or through a server that
does not drive the run (another ``onward serve``, a worker on the same store).

Every feed keeps its events in the store before any reader sees them (``Control``'s
``keep``), numbered as their SSE ids. :func:`follow` gives a run's events after an id:
those kept, then, while its record says it is pending or running, the new ones as the
driver keeps them (polled), or live from this server's feed once this server drives it
(a run recovered here). It ends when the run's record has ended, or is gone (rolled
back, deleted). A run whose events are past their retention streams nothing more. The
store's reads wait out a database blip; one gone past ``ONWARD_PG_OUTAGE`` ends the stream
with an ``error`` event whose id is the last one sent (join again with it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Hashable
from typing import Any, cast

from onward.errors import StoreError
from onward.serve import states
from onward.serve.clients import Clients
from onward.serve.context import Serving
from onward.serve.feed import Batch, Keep, RunKeep
from onward.serve.states import Resolve, StateAt
from onward.store.runs import ApiRunStatus, RunEvent

POLL = 0.25
"""Seconds between looks at the store for a run driven elsewhere."""
RETENTION_SECONDS = 3600.0
"""How long the events of an ended run are kept for joins (``Recovery`` drops older)."""
UNFINISHED = (ApiRunStatus.PENDING, ApiRunStatus.RUNNING)


def keeper(clients: Clients) -> Callable[[str, str], Keep]:
    """``Control``'s ``keep``: each run's events into the store, as they are fed (a
    values event as its checkpoint's reference, onward.serve.states), through the few
    clients the feeds share (:meth:`Clients.shared`); the runs whose batches are due at
    once in one statement (:class:`~onward.serve.feed.RunKeep`)."""

    def together(parts: list[tuple[Hashable, Batch]]) -> None:
        runs = [
            (run_id, thread_id, [(seq, event, stored(data)) for seq, (event, data) in batch])
            for (run_id, thread_id), batch in cast("list[tuple[tuple[str, str], Batch]]", parts)
        ]
        clients.shared(runs[0][0]).store.threads.add_runs_events(runs)

    def for_run(run_id: str, thread_id: str) -> Keep:
        return RunKeep((run_id, thread_id), together)

    return for_run


def stored(data: Any) -> Any:
    return data.stored() if isinstance(data, StateAt) else data


def resolver(ctx: Serving, run_id: str) -> Resolve:
    """The JSON of a run's values events (a checkpoint another process has not committed
    yet is waited for while the run goes on)."""

    def unfinished() -> bool:
        with ctx.clients.use() as ow:
            row = ow.store.threads.get_run(run_id)
        return row is not None and row.status in UNFINISHED

    return states.resolver(ctx.clients, unfinished, POLL)


def _kept(ctx: Serving, run_id: str, after: int) -> tuple[list[RunEvent], bool]:
    """(events after ``after``, whether the run may still add more)."""
    with ctx.clients.use() as ow:
        row = ow.store.threads.get_run(run_id)
        more = row is not None and row.status in UNFINISHED
        events = ow.store.threads.events(run_id, after)
        if not more and not events:
            return [], False
        if not more:  # ended: everything it fed was kept before its record ended
            return events, len(events) == 500
    return events, True


def unreachable(exc: StoreError, seen: int) -> dict[str, Any]:
    """The last event of a stream the store could not be read for: what to do next. Its
    id is the last one sent, so a client that joins again with it misses nothing."""
    return {
        "error": type(exc).__name__,
        "message": f"{exc}. The stream stopped here, the run did not: join it again with "
        f"Last-Event-ID {seen} for the rest",
        "last_event_id": str(seen),
    }


async def follow(
    ctx: Serving, run_id: str, after: int = 0
) -> AsyncIterator[tuple[int, tuple[str, Any]]]:
    """The run's events numbered past ``after`` until it ends (see the module doc)."""
    seen, use_live, last_event = after, True, ""
    while True:
        live = ctx.control.feed(run_id) if use_live else None
        if live is not None and seen >= live.start:
            async for number, item in live.follow(seen):
                last_event = item[0]
                yield number, item
            # Its drive ended here; the record says whether another goes on elsewhere.
            seen, use_live = max(seen, live.last), False
            continue
        try:
            events, more = await asyncio.to_thread(_kept, ctx, run_id, seen)
        except StoreError as exc:  # gone past ONWARD_PG_OUTAGE: end, resumable
            if last_event != "error":  # (its drive's own error said so already)
                yield seen, ("error", unreachable(exc, seen))
            return
        if live is not None:  # only what an earlier drive fed, then the live feed
            events = [e for e in events if e.seq <= live.start]
        for e in events:
            seen, last_event = e.seq, e.event
            if e.data is not None or e.event != "values":
                yield e.seq, (e.event, e.data)
        if live is not None:
            seen = max(seen, live.start)
            continue
        if not more:
            return
        if not events:
            await asyncio.sleep(POLL)
