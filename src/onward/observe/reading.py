"""One way to read a run: the lightest read that is exact, falling back to the next.

Every face reads a run here: ``onward status`` and ``onward inbox`` (from the store's
tables, before anything else is opened), the Python API (``Onward.get``,
``Onward.pending``, ``Onward.inbox``), the notebook (which shows what those return), and
the server (its web page's run views through ``Onward.get``; a thread's status through
``Onward.pending``; its values and states through :func:`snapshot`). Three reads of a
run's latest checkpoint exist, each exact where it answers and each saying so by raising
:class:`~onward.errors.FullRead` where it cannot be:

1. plain values, without LangGraph or pydantic (onward.observe.plain for ``status``'s
   text, onward.observe.questions for the inbox);
2. onward's models, without LangGraph (onward.observe.latest: the full ``RunView`` and
   the questions), from the tables or from an open store's own connection;
3. through LangGraph (``graph.get_state``, onward.client.views): a running run (what it
   pauses before is LangGraph's next tasks), a run with a task's writes pending, a state
   of an older schema, a type outside onward's.

The functions on :class:`~onward.store.tables.Tables` return None where the light reads
give up (the caller has no graph yet: it opens the store and calls the ``Onward`` ones);
the ones on an ``Onward`` answer always, with the third read as their last level. The
tables every light read decodes with come from ``RunState``'s own metadata
(onward.observe.shape, made by ``python -m onward.observe.shapegen``), a view is made from
a state by one function (onward.observe.view.run_view), and a cancelled run is recognised
by one rule (onward.observe.checkpoint.stopped). The API's wire formats (a thread's
values, its states and history) are LangGraph's own ``StateSnapshot``: :func:`snapshot`
reads it, the third level only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from onward.errors import FullRead

if TYPE_CHECKING:
    from langgraph.types import StateSnapshot

    from onward.client.facade import Onward
    from onward.model.state import RunState
    from onward.observe.events import EventLog
    from onward.observe.latest import Source
    from onward.observe.plain import PlainView
    from onward.observe.questions import Question
    from onward.observe.view import RunView
    from onward.people.inbox import PendingDecision
    from onward.store.database import Store
    from onward.store.encryption import Cipher
    from onward.store.leases import Leases
    from onward.store.sql import Db
    from onward.store.tables import RunEntry, Tables

T = TypeVar("T")


# -- from the tables (nothing else opened): None where the light reads give up ----------


def plain_view(tables: Tables, thread_id: str) -> PlainView | None:
    """What ``onward status`` prints of a run, as plain values; None where that read
    cannot be exact (then :func:`view`)."""
    from onward.observe import plain

    return _light(lambda: plain.view(tables, thread_id))


def view(tables: Tables, thread_id: str) -> RunView | None:
    """The run's view with onward's models, without LangGraph; None where that read
    cannot be exact (then :func:`get`)."""
    from onward.observe import latest

    return _light(lambda: latest.view(tables, thread_id))


def inbox(
    tables: Tables, runs: Sequence[RunEntry]
) -> Sequence[Question] | Sequence[PendingDecision] | None:
    """The questions of ``runs``, oldest first: as plain values, else with onward's
    models; None where neither can be exact (then ``Onward.inbox``)."""
    from onward.observe import questions

    plain = _light(lambda: questions.inbox(tables, runs))
    if plain is not None:
        return plain
    from onward.observe import latest  # onward's models: only when the plain read gave up

    return _light(lambda: latest.questions(tables, runs))


# -- through an open Onward: the light read first, LangGraph's last -------------------


def get(ow: Onward, thread_id: str) -> RunView:
    """``Onward.get``: the run's view, without LangGraph's state where that is exact."""
    from onward.client import views
    from onward.observe import latest

    run = views.row(ow.store, thread_id)
    found = _light(
        lambda: _on_store(ow.store, lambda s: latest.view_of(s, thread_id, run.objective))
    )
    if found is not None:
        return found
    return views.view(ow.store, thread_id, run, views.snapshot(ow, thread_id))


def pending(ow: Onward, thread_id: str) -> list[PendingDecision]:
    """``Onward.pending``: the questions the run waits on, oldest first."""
    from onward.client import views
    from onward.observe import latest

    run = views.row(ow.store, thread_id)
    found = _light(lambda: _on_store(ow.store, lambda s: latest.asked(s, thread_id, run.objective)))
    if found is not None:
        return found
    return views.pending_of(thread_id, run, views.snapshot(ow, thread_id))


def newest_checkpoint(ow: Onward, thread_id: str) -> str | None:
    """The id of the thread's newest checkpoint (None before its first), read alone: no
    value of it is loaded."""
    from onward.observe.checkpoint import latest_id

    return _light(lambda: _on_store(ow.store, lambda s: latest_id(s.db, thread_id)))


def state(ow: Onward, thread_id: str) -> RunState:
    """``Onward.state``: the typed state is LangGraph's to give (the third read only)."""
    from onward.client import views

    return views.state(ow, thread_id)


def snapshot(ow: Onward, thread_id: str) -> StateSnapshot:
    """LangGraph's snapshot of the run's latest checkpoint, for the API's wire formats
    (the third read only: they show every channel and task as LangGraph Server does)."""
    from onward.client import views

    return views.snapshot(ow, thread_id)


@dataclass(frozen=True, slots=True)
class _Opened:
    """An open store's reads as the light read takes them (a :class:`Source`)."""

    db: Db
    cipher: Cipher | None
    leases: Leases
    events: EventLog


def _on_store(store: Store, read: Callable[[Source], T]) -> T:
    """``read`` on the store's own connection, once the rows its saver defers are
    committed (as the saver does before any read of its own)."""
    store.held.make_durable()
    with store.db.use() as db:
        return read(_Opened(db, store.cipher, store.leases, store.events))


def _light(read: Callable[[], T]) -> T | None:
    """What ``read`` gives, or None where it cannot be exact."""
    try:
        return read()
    except FullRead:
        return None
