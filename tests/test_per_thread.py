"""What a node's collectors keep (observe/per_thread.py): a list per thread while
collecting, the previous one restored after, also after an error."""

from __future__ import annotations

import threading

import pytest

from onward.observe.per_thread import PerThread


def test_collecting_keeps_a_list_per_thread_and_restores_the_previous_one() -> None:
    collector: PerThread[int] = PerThread()
    assert collector.add(1) is False  # nobody collects
    with collector.collecting() as outer:
        assert collector.add(1)
        with collector.collecting() as inner:
            assert collector.add(2)
            seen: list[bool] = []
            other = threading.Thread(target=lambda: seen.append(collector.add(3)))
            other.start()
            other.join()
            assert seen == [False]  # another thread has no collector
        assert collector.add(4)
        failed: list[list[int]] = []

        def fail() -> None:
            with collector.collecting() as items:
                failed.append(items)
                collector.add(5)
                raise KeyError("the node failed")

        with pytest.raises(KeyError):
            fail()
        assert collector.add(6)
    assert collector.add(7) is False
    assert (outer, inner, failed) == ([1, 4, 6], [2], [[5]])
