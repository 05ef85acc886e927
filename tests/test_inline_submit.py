"""Which saver calls run in the calling thread (checkpointing/inline.py): every call of a
run to onward's saver, on each backend and durability setting; ``_ours`` unwraps the
store's one wrapper by hand rather than through ``inspect.unwrap``, and must decide
exactly as unwrapping the whole chain does."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from onward import Onward
from onward.checkpointing import inline
from onward.checkpointing.savers import FlushedReads
from onward.model.state import Plan, PlanStep, RunStatus, StepStatus


def _reference(fn: Any) -> bool:
    """``_ours`` as it was: the whole chain through inspect.unwrap."""
    fn = inspect.unwrap(fn)
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, FlushedReads):
        return True
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
    inline_saver = _Saver()
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


@pytest.mark.parametrize("fsync", [False, True], ids=["default", "ONWARD_FSYNC"])
def test_a_run_hands_none_of_its_saver_calls_to_the_executor(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    """On every backend and durability setting, LangGraph's ``put`` and ``put_writes`` to
    onward's saver run in the calling thread; only other work reaches the executor."""
    if fsync:
        monkeypatch.setenv("ONWARD_FSYNC", "1")
    handed: list[Any] = []

    def recording(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        handed.append(fn)
        return submit(self, fn, *args, **kwargs)

    submit = inline._submit
    monkeypatch.setattr(inline, "_submit", recording)
    steps = [
        PlanStep(id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}"] if i else [])
        for i in range(3)
    ]
    with Onward(db_url, model=None) as ow:
        view = ow.run(plan=Plan(steps=steps), workdir=workdir)
        saver = ow.store.saver
    assert view.status == RunStatus.DONE
    assert [s.status for s in view.steps] == [StepStatus.DONE] * 3
    owners = [getattr(inspect.unwrap(fn), "__self__", None) for fn in handed]
    calls = [o for o in owners if o is saver or getattr(o, "checkpointer", None) is saver]
    assert calls == []
