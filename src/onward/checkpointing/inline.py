"""Run LangGraph's calls to onward's savers in the calling thread.

LangGraph hands every ``put`` and ``put_writes`` to its background executor, and with
``durability="sync"`` the loop then waits for the ``put`` at the end of each superstep.
For onward's savers a call is cheap — a deferred append, or one commit the loop waits
for anyway — so each handoff cost more than the work: a thread wake-up and a GIL round
trip, four per plan step (measured: ~14 % of a no-op step's CPU, more wall time on a
loaded machine). Running them where they are submitted keeps LangGraph's order (the
loop already waits for the previous ``put`` before the next) and its error paths: a
failed call's future carries the exception, and a failed ``put_writes`` is re-raised
when the loop's executor exits, as LangGraph does with its background tasks.

Only calls to an onward saver are run inline; parallel tasks and any other
checkpointer still go to the executor. Every call to an onward saver is, the
``put_writes`` that waits on the disk or the network included (Postgres, SQLite with
``synchronous=FULL``: the step's one durable commit): on the executor it overlapped the
loop's work until the next ``put`` waited for it, but the hand-off cost more than the
overlap saved (paired, ``bench/commits.py``: see docs/benchmarks.md, ninth pass).
"""

from __future__ import annotations

import concurrent.futures
import inspect
from contextvars import copy_context
from typing import Any

from langgraph.pregel import _executor, _loop

from onward.checkpointing.savers import FlushedReads

_PUT_AFTER_PREVIOUS = _loop.SyncPregelLoop._checkpointer_put_after_previous
_submit = _executor.BackgroundExecutor.submit


def _ours(fn: Any) -> bool:
    if getattr(fn, "__func__", None) is _PUT_AFTER_PREVIOUS:  # the loop's put: not wrapped
        return isinstance(getattr(fn.__self__, "checkpointer", None), FlushedReads)
    # The store wraps its saver's calls once (driver errors → StoreError): unwrap that one
    # level by hand, as inspect.unwrap's set-up cost ~10k instructions a call (twice a
    # step); a deeper (or looping) chain still goes through inspect.unwrap.
    fn = getattr(fn, "__wrapped__", fn)
    if hasattr(fn, "__wrapped__"):
        fn = inspect.unwrap(fn)
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, FlushedReads):  # put_writes, bound to the saver
        return True
    return getattr(fn, "__func__", None) is _PUT_AFTER_PREVIOUS and isinstance(
        getattr(owner, "checkpointer", None), FlushedReads
    )


def _inline_submit(
    self: _executor.BackgroundExecutor,
    fn: Any,
    *args: Any,
    __name__: str | None = None,
    __cancel_on_exit__: bool = False,
    __reraise_on_exit__: bool = True,
    __next_tick__: bool = False,
    **kwargs: Any,
) -> concurrent.futures.Future[Any]:
    if __next_tick__ or not _ours(fn):
        return _submit(
            self,
            fn,
            *args,
            __name__=__name__,
            __cancel_on_exit__=__cancel_on_exit__,
            __reraise_on_exit__=__reraise_on_exit__,
            __next_tick__=__next_tick__,
            **kwargs,
        )
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    try:
        future.set_result(copy_context().run(fn, *args, **kwargs))
    except BaseException as exc:
        future.set_exception(exc)
        self.tasks[future] = (__cancel_on_exit__, __reraise_on_exit__)  # re-raised on exit
    return future


def install() -> None:
    """Route LangGraph's saver calls through :func:`_inline_submit` (idempotent)."""
    _executor.BackgroundExecutor.submit = _inline_submit  # type: ignore[method-assign]
