"""Which saver calls run in the calling thread (checkpointing/inline.py): ``_ours`` unwraps
the store's one wrapper by hand rather than through ``inspect.unwrap``; it must decide
exactly as unwrapping the whole chain does."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from onward.checkpointing import inline
from onward.checkpointing.savers import FlushedReads


def _reference(fn: Any) -> bool:
    """``_ours`` as it was: the whole chain through inspect.unwrap."""
    fn = inspect.unwrap(fn)
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, FlushedReads):
        return owner.inline_writes
    return getattr(fn, "__func__", None) is inline._PUT_AFTER_PREVIOUS and isinstance(
        getattr(owner, "checkpointer", None), FlushedReads
    )


class _Saver(FlushedReads):
    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        pass


class _Loop:
    def __init__(self, checkpointer: Any) -> None:
        self.checkpointer = checkpointer


def _wrapped(fn: Callable[..., Any], times: int) -> Callable[..., Any]:
    for _ in range(times):
        fn = functools.wraps(fn)(lambda *a, inner=fn, **k: inner(*a, **k))
    return fn


def _put(checkpointer: Any) -> Any:
    return types.MethodType(inline._PUT_AFTER_PREVIOUS, _Loop(checkpointer))


def _cases() -> list[tuple[str, Any]]:
    inline_saver, deferring_saver = _Saver(), _Saver()
    inline_saver.inline_writes = True
    cases: list[tuple[str, Any]] = [
        ("put, onward saver", _put(inline_saver)),
        ("put, other saver", _put(InMemorySaver())),
        ("put, no saver", _put(None)),
        ("put_writes of another saver", InMemorySaver().put_writes),
        ("a plain function", len),
    ]
    for times in (0, 1, 2, 3):
        cases += [
            (f"inline put_writes wrapped {times}x", _wrapped(inline_saver.put_writes, times)),
            (f"deferring put_writes wrapped {times}x", _wrapped(deferring_saver.put_writes, times)),
            (f"other put_writes wrapped {times}x", _wrapped(InMemorySaver().put_writes, times)),
            (f"onward put wrapped {times}x", _wrapped(_put(inline_saver), times)),
        ]
    return cases


@pytest.mark.parametrize(("name", "fn"), _cases(), ids=[c[0] for c in _cases()])
def test_ours_decides_as_unwrapping_the_whole_chain_does(name: str, fn: Any) -> None:
    assert inline._ours(fn) is _reference(fn)


def test_the_cases_cover_both_answers() -> None:
    answers = {_reference(fn) for _, fn in _cases()}
    assert answers == {True, False}


@pytest.mark.parametrize("length", [1, 2, 3])
def test_a_looping_wrapper_chain_is_refused_as_inspect_unwrap_refuses_it(length: int) -> None:
    chain = [_wrapped(len, 1) for _ in range(length)]
    for i, fn in enumerate(chain):
        fn.__wrapped__ = chain[(i + 1) % length]  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="wrapper loop"):
        inspect.unwrap(chain[0])
    with pytest.raises(ValueError, match="wrapper loop"):
        inline._ours(chain[0])
