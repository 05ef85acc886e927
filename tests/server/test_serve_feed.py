"""A run's feed: numbered items any number of readers follow from any point (the SSE ids
and Last-Event-ID of onward serve), and a long run's old values chunks are not kept."""

from __future__ import annotations

import asyncio
import threading

from onward.serve.feed import DONE, KEEP_ITEMS, Feed


def read(feed: Feed, after: int = 0) -> list[tuple[int, tuple[str, object]]]:
    async def go() -> list[tuple[int, tuple[str, object]]]:
        return [x async for x in feed.follow(after)]

    return asyncio.run(go())


def test_readers_get_numbered_items_from_where_they_say_until_the_end() -> None:
    feed = Feed()

    def drive() -> None:
        for i in range(5):
            feed.put(("updates", i))
        feed.put(DONE)
        feed.put(("updates", 99))  # after the end: dropped

    threading.Thread(target=drive).start()
    assert read(feed) == [(i + 1, ("updates", i)) for i in range(5)]
    assert read(feed, 3) == [(4, ("updates", 3)), (5, ("updates", 4))]
    assert read(feed, 5) == []


def test_old_values_chunks_keep_their_number_but_not_their_data() -> None:
    feed = Feed()
    total = KEEP_ITEMS * 2
    for i in range(total):
        feed.put(("values" if i % 2 else "updates", i))
    feed.put(DONE)
    got = read(feed)
    numbers = [n for n, _item in got]
    assert numbers == sorted(numbers)
    assert all(item[0] == "updates" for n, item in got if n <= total - KEEP_ITEMS)
    assert len([1 for _n, item in got if item[0] == "updates"]) == total // 2
    assert got[-1] == (total, ("values", total - 1))
