"""The store's timer thread (store/ticking.py): one thread runs every drive's periodic jobs,
a job taken back runs no more, and the looks for cancels of many drives are one read."""

from __future__ import annotations

import threading
from collections.abc import Collection

from onward.store import ticking
from onward.store.ticking import CancelLooks, Ticker


def test_jobs_share_one_thread_and_stop_for_good() -> None:
    ticker = Ticker("test-ticker")
    ran: list[str] = []
    seen_on: set[str] = set()
    done = threading.Event()

    def job(name: str) -> bool:
        seen_on.add(threading.current_thread().name)
        ran.append(name)
        if ran.count("a") >= 3 and ran.count("b") >= 3:
            done.set()
        return True

    a = ticker.every(0.01, lambda: job("a"))
    b = ticker.every(0.01, lambda: job("b"))
    assert done.wait(5)
    a.stop()
    b.stop()
    after = len(ran)
    threading.Event().wait(0.05)
    assert len(ran) == after  # nothing runs once stopped
    assert seen_on == {"test-ticker"}


def test_a_job_that_says_no_more_or_fails_is_handled() -> None:
    ticker = Ticker("test-ticker")
    counts = {"once": 0, "failing": 0}
    failed_twice = threading.Event()

    def once() -> bool:
        counts["once"] += 1
        return False

    def failing() -> bool:
        counts["failing"] += 1
        if counts["failing"] >= 2:
            failed_twice.set()
        raise RuntimeError("a store hiccup")

    ticker.every(0.01, once)
    job = ticker.every(0.01, failing)
    assert failed_twice.wait(5)  # an error does not end the job (nor the others)
    job.stop()
    assert counts["once"] == 1


def test_the_thread_ends_when_idle_and_comes_back() -> None:
    ticking_linger = ticking.LINGER
    ticking.LINGER = 0.05
    try:
        ticker = Ticker("test-ticker")
        first = threading.Event()
        ticker.every(0.01, lambda: (first.set(), False)[1])
        assert first.wait(5)
        for _ in range(200):
            if ticker._thread is None:
                break
            threading.Event().wait(0.01)
        assert ticker._thread is None
        again = threading.Event()
        ticker.every(0.01, lambda: (again.set(), False)[1])
        assert again.wait(5)
    finally:
        ticking.LINGER = ticking_linger


def test_cancel_looks_read_once_for_every_watched_thread() -> None:
    asked_of: list[list[str]] = []
    looked = threading.Event()

    def find(threads: Collection[str]) -> set[str]:
        asked_of.append(sorted(threads))
        looked.set()
        return {"t2"} & set(threads)

    looks = CancelLooks(Ticker("test-ticker"), 0.01)
    for t in ("t1", "t2", "t3"):
        looks.watch(t, find)
    assert looked.wait(5)
    for _ in range(200):
        if looks.asked("t2"):
            break
        threading.Event().wait(0.01)
    assert looks.asked("t2")
    assert not looks.asked("t1")
    assert asked_of[0] == ["t1", "t2", "t3"]  # one read for all three
    for t in ("t1", "t2", "t3"):
        looks.unwatch(t)
    assert not looks.asked("t2")  # forgotten once its drive ended
