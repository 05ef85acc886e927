"""One way to read a run: the lightest read that is exact, falling back to the next.

Three reads of a run's latest checkpoint exist, each exact where it answers and each
saying so by raising :class:`~onward.errors.FullRead` where it cannot be:

1. plain values, without LangGraph or pydantic (onward.observe.plain for ``status``'s
   text, onward.observe.questions for the inbox);
2. onward's models, without LangGraph (onward.observe.latest: the full ``RunView``);
3. through LangGraph (``Onward.get`` / ``Onward.inbox``, onward.client.views), where
   the functions here return None.

``onward status`` and ``onward inbox`` read through here; the server and the notebook
hold LangGraph already and read the third way. The tables every light read decodes with
come from ``RunState``'s own metadata (onward.observe.shape), and a cancelled run is
recognised by one rule (onward.observe.checkpoint.stopped).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from onward.errors import FullRead

if TYPE_CHECKING:
    from onward.observe.plain import PlainView
    from onward.observe.questions import Question
    from onward.observe.view import RunView
    from onward.people.inbox import PendingDecision
    from onward.store.tables import RunEntry, Tables

T = TypeVar("T")


def plain_view(tables: Tables, thread_id: str) -> PlainView | None:
    """What ``onward status`` prints of a run, as plain values; None where that read
    cannot be exact (then :func:`view`)."""
    from onward.observe import plain

    return _light(lambda: plain.view(tables, thread_id))


def view(tables: Tables, thread_id: str) -> RunView | None:
    """The run's view with onward's models, without LangGraph; None where that read
    cannot be exact (then the full read: ``Onward.get``)."""
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


def _light(read: Callable[[], T]) -> T | None:
    """What ``read`` gives, or None where it cannot be exact."""
    try:
        return read()
    except FullRead:
        return None
