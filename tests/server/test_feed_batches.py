"""A kept feed keeps a busy run's items in few store transactions (issue 39).

A served run fed one values event per superstep, and the feed's writer kept each in its
own transaction beside the saver's: on SQLite the two took the write lock in turn, a
1,000-step ``runs.wait`` cost about twice the wall of the same run through ``Onward.run``.
The writer now keeps at most one batch per :data:`~onward.serve.feed.KEEP_EVERY`; the
first item after a pause and the feed's end go at once, and a reader still sees only
what was kept."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from onward.serve import feed as feeds
from onward.serve.feed import DONE, Feed
from tests.support.serve_durable import fed_and_followed

Batch = list[tuple[int, tuple[str, Any]]]


def _a_feed_whose_first_item_was_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Feed, list[int]]:
    """A feed that keeps a batch only at its first item and its end (KEEP_EVERY longer
    than a test), its first item kept; and the numbers it has kept."""
    monkeypatch.setattr(feeds, "KEEP_EVERY", 3600.0)
    kept: list[int] = []
    first_kept = threading.Event()

    def keep(batch: Batch) -> None:
        kept.extend(n for n, _item in batch)
        first_kept.set()

    feed = Feed(keep=keep)
    feed.put(("metadata", {}))
    assert first_kept.wait(5)
    return feed, kept


def test_items_put_while_a_batch_is_kept_wait_for_the_next_one_and_the_end_goes_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(feeds, "KEEP_EVERY", 3600.0)  # longer than the test: only the end
    batches: list[list[int]] = []
    first_kept = threading.Event()

    def keep(batch: Batch) -> None:
        batches.append([n for n, _item in batch])
        first_kept.set()

    feed = Feed(keep=keep)
    feed.put(("metadata", {}))
    assert first_kept.wait(5)  # the first item after a pause is kept at once
    for i in range(500):
        feed.put(("updates", i))
    feed.put(DONE)
    assert feed.wait_done(5)  # the end did not wait for KEEP_EVERY
    assert batches == [[1], list(range(2, 502))]
    assert [n for n, _item in feed.items()] == list(range(1, 502))


def test_a_reader_sees_a_batch_only_once_it_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(feeds, "KEEP_EVERY", 3600.0)
    kept: list[int] = []

    def keep(batch: Batch) -> None:
        kept.extend(n for n, _item in batch)

    feed = Feed(keep=keep)
    got, seen_unkept = fed_and_followed(feed, kept)
    assert got == list(range(1, 51))
    assert seen_unkept == []
    assert kept == list(range(1, 51))


def test_a_feed_told_to_stop_keeping_hands_over_what_waits_for_its_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A drive that gave up on the database: what waited for the next batch reaches the
    readers now, not after KEEP_EVERY, and is not kept."""
    feed, kept = _a_feed_whose_first_item_was_kept(monkeypatch)
    feed.put(("values", 1))
    feed.put(("values", 2))
    feed.unkept()
    feed.put(("error", {"error": "DatabaseUnavailable"}))
    feed.put(DONE)
    assert feed.wait_done(5)
    assert kept == [1]
    assert [n for n, _item in feed.items()] == [1, 2, 3, 4]


def test_a_stream_sends_the_events_a_feed_has_ready_in_one_write() -> None:
    """The SSE frames are those ``EventSourceResponse`` makes of each event; the events
    that are there together go in one body chunk (one write), not one each."""
    import json

    from sse_starlette import ServerSentEvent

    from onward.serve.routes.runs import events

    feed = Feed()
    feed.put(("metadata", {"run_id": "r"}))
    for i in range(5):
        feed.put(("updates", {"step": i, "text": "é\nzwei"}))
    feed.put(DONE)

    async def chunks() -> list[bytes]:
        return [c async for c in events(feed)]

    got = asyncio.run(chunks())
    expected = b"".join(
        ServerSentEvent(json.dumps(data, ensure_ascii=False), event=event, id=str(n)).encode()
        for n, (event, data) in feed.items()
    )
    assert got == [expected]

    async def only_updates_after_2() -> list[bytes]:
        return [c async for c in events(feed, 2, {"updates"})]

    later = asyncio.run(only_updates_after_2())
    assert len(later) == 1
    assert later[0].count(b"event: updates") == 4


def test_kept_all_keeps_what_waits_for_its_batch_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A drive's end waits for its feed to keep what it fed before the run's record says
    it ended: a reader of the store takes an ended record for a complete stream."""
    feed, kept = _a_feed_whose_first_item_was_kept(monkeypatch)
    for i in range(3):
        feed.put(("values", i))
    assert feed.kept_all(5)  # not after KEEP_EVERY
    assert kept == [1, 2, 3, 4]
    assert [n for n, _item in feed.items()] == [1, 2, 3, 4]
    assert feed.kept_all(0)  # nothing waits: at once
    feed.put(DONE)
    assert feed.wait_done(5)


def test_an_sse_frame_is_the_bytes_server_sent_event_makes_of_it() -> None:
    """``frame`` joins an event from its JSON bytes (no decode and encode of a long
    thread's state) into what ``ServerSentEvent`` makes, line breaks in a name dropped."""
    import json

    from sse_starlette import ServerSentEvent

    from onward.serve.routes.runs import SEP, frame

    data = json.dumps({"text": "é\nzwei\r\u2028", "n": [1, 2]}, ensure_ascii=False)
    for event, event_id in [("values", "7"), ("updates|sub:1", "r1-8"), ("a\nb\r", "9\n")]:
        expected = ServerSentEvent(data, event=event, id=event_id, sep=SEP.decode()).encode()
        assert frame(event, event_id, data.encode()) == expected


def test_a_held_values_chunk_is_encoded_on_the_loop_and_a_store_read_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A values chunk the drive holds is encoded where the stream runs (no thread hop);
    one whose kept text needs a client opened (the pool's first) is resolved in a thread,
    so a store that does not answer never stalls the event loop. The JSON is the same."""
    from types import SimpleNamespace

    from onward.serve import states
    from onward.serve.clients import Clients
    from onward.serve.encoded import values_bytes

    opened_on: list[threading.Thread] = []

    def factory() -> Any:
        opened_on.append(threading.current_thread())
        return SimpleNamespace(store=SimpleNamespace(saver=object()))  # keeps no values

    hops: list[Any] = []
    real = asyncio.to_thread

    async def counted(fn: Any, *args: Any) -> Any:
        hops.append(fn)
        return await real(fn, *args)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    one = states.resolver(Clients(factory))
    values = {"status": "done", "n": [1, 2]}
    unsaved = states.StateAt("t", values)
    saved = states.StateAt("t", values, "checkpoint-1")

    async def resolve_all() -> list[Any]:
        return [await one(unsaved), await one(saved), await one(saved)]

    got = asyncio.run(resolve_all())
    assert got == [values_bytes(values)] * 3
    assert len(hops) == 1  # the saved chunk before the pool's kept values were known
    assert opened_on
    assert opened_on[0] is not threading.main_thread()


def _run_keep_feeds(together: Any, n: int) -> list[Feed]:
    return [Feed(keep=feeds.RunKeep((f"r{i}", f"t{i}"), together)) for i in range(n)]


def test_the_batches_of_runs_due_at_once_are_kept_in_one_call() -> None:
    """While the store keeps one run's batch, what five other runs put gathers: it is
    kept next, in one call for the five (one statement), each run's items numbered as
    its own."""
    calls: list[list[tuple[Any, list[int]]]] = []
    first_in, go_on = threading.Event(), threading.Event()

    def together(parts: list[tuple[Any, Batch]]) -> None:
        calls.append([(key, [n for n, _item in batch]) for key, batch in parts])
        first_in.set()
        assert go_on.wait(5)

    slow, *others = _run_keep_feeds(together, 6)
    slow.put(("metadata", {}))
    assert first_in.wait(5)  # the writer is in the store with the first run's batch
    for feed in others:
        feed.put(("metadata", {}))
        feed.put(("values", 1))
    go_on.set()
    for feed in [slow, *others]:
        feed.put(DONE)
        assert feed.wait_done(5)
    assert calls[0] == [(("r0", "t0"), [1])]
    assert calls[1] == [((f"r{i}", f"t{i}"), [1, 2]) for i in range(1, 6)]
    assert len(calls) == 2
    assert all([n for n, _item in feed.items()] == [1, 2] for feed in others)


def test_a_feed_told_to_stop_keeping_is_not_held_up_by_another_runs_slow_keep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The writer is every feed's: while it waits for the store with one run's batch, a
    run whose drive gave up on the database hands over what waited for its next batch,
    and ends its stream, at once."""
    other, other_kept = _a_feed_whose_first_item_was_kept(monkeypatch)
    other.put(("values", 1))  # waits for the next batch (KEEP_EVERY is an hour)
    stuck, release = threading.Event(), threading.Event()

    def slow_keep(batch: Batch) -> None:
        stuck.set()
        assert release.wait(10)

    waiting = Feed(keep=slow_keep)
    waiting.put(("metadata", {}))
    assert stuck.wait(5)  # the writer is in the store with the other run's batch
    try:
        other.unkept()
        other.put(("error", {"error": "DatabaseUnavailable"}))
        other.put(DONE)
        assert other.wait_done(5)  # not behind the other run's keep
        assert [n for n, _item in other.items()] == [1, 2, 3]
        assert other_kept == [1]
    finally:
        release.set()
    waiting.put(DONE)
    assert waiting.wait_done(5)


def test_a_feed_that_fails_in_the_writer_does_not_stop_it_for_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The writer is every feed's: a fault with one feed's batch is logged, and the
    other runs' streams go on."""
    broken = Feed(keep=lambda batch: None)
    real_take = Feed._take

    def take(self: Feed, now: float) -> Any:
        if self is broken:
            raise RuntimeError("a fault with this feed")
        return real_take(self, now)

    monkeypatch.setattr(Feed, "_take", take)
    broken.put(("metadata", {}))
    kept: list[int] = []
    fine = Feed(keep=lambda batch: kept.extend(n for n, _item in batch))
    fine.put(("metadata", {}))
    fine.put(DONE)
    assert fine.wait_done(5)
    assert kept == [1]
    monkeypatch.setattr(Feed, "_take", real_take)  # the broken one goes too, once mended
    broken.put(DONE)
    assert broken.wait_done(5)
