"""Looking back at a run: its event log, totals, checkpoints, a past state, the HTML report."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from onward.client.views import config, row
from onward.errors import UsageError
from onward.model.state import RunState, RunStatus, migrate, utcnow
from onward.observe.report import render_html
from onward.observe.timeline import Summary, Timeline, summarise, timeline

if TYPE_CHECKING:
    from onward.client.facade import Onward


def events(ow: Onward, thread_id: str, step: str | None, kinds: Sequence[str]) -> Timeline:
    row(ow.store, thread_id)
    return timeline(ow.store.events.list(thread_id), step=step, kinds=set(kinds) or None)


def summary(ow: Onward, thread_id: str) -> Summary:
    row(ow.store, thread_id)
    return summarise(thread_id, ow.state(thread_id), ow.store.events.list(thread_id), utcnow())


def checkpoints(ow: Onward, thread_id: str, limit: int | None) -> list[dict[str, Any]]:
    row(ow.store, thread_id)
    snaps = list(ow.graph.get_state_history(config(thread_id), limit=limit))
    out = []
    for i, snap in enumerate(snaps):
        meta = snap.metadata or {}
        older = snaps[i + 1] if i + 1 < len(snaps) else None
        # The node(s) whose writes made this checkpoint ran as the older one's "next";
        # an edit (update_state: a decision, a cancel) made it itself.
        source = str(meta.get("source", ""))
        node = source if source == "update" or older is None else ",".join(older.next)
        values = snap.values
        status = values.status if isinstance(values, RunState) else (values or {}).get("status")
        out.append(
            {
                "checkpoint_id": snap.config["configurable"]["checkpoint_id"],
                "step": meta.get("step"),
                "node": node or str(meta.get("source", "")),
                "next": list(snap.next),
                "status": str(status.value if isinstance(status, RunStatus) else status or ""),
                "created_at": snap.created_at,
            }
        )
    return out


def state_at(ow: Onward, thread_id: str, checkpoint_id: str | None) -> tuple[RunState, list[str]]:
    row(ow.store, thread_id)
    at = config(thread_id)
    if checkpoint_id:
        at = {**at, "configurable": {**at["configurable"], "checkpoint_id": checkpoint_id}}
    snap = ow.graph.get_state(at)
    if checkpoint_id and snap.created_at is None:
        raise UsageError(
            f"run {thread_id} has no checkpoint {checkpoint_id}; list them with "
            f"`onward history {thread_id}`"
        )
    values = snap.values
    state = (
        values
        if isinstance(values, RunState)
        else RunState.model_validate(migrate(dict(values or {})))
    )
    return state, list(snap.next)


def report_html(ow: Onward, thread_id: str) -> str:
    logged = ow.timeline(thread_id)
    return render_html(thread_id, ow.state(thread_id), logged, ow.summary(thread_id))
