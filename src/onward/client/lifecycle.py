"""A run's life outside a drive: cancelling it (and undoing its effects), forking it from a
past state, removing finished runs past their retention."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage
from pydantic import BaseModel

from onward.client.deciding import whoami
from onward.client.leasing import acquire
from onward.client.views import RunView, config
from onward.effects.compensation import Compensation, CompensationStatus, compensate_run
from onward.errors import UsageError
from onward.graph.schedule import FINALIZE, GATE
from onward.model.state import (
    Decision,
    DecisionAction,
    RunFailure,
    RunFailureKind,
    RunState,
    RunStatus,
    StepStatus,
    utcnow,
)
from onward.observe.chat import report_marker, reported
from onward.observe.kinds import EventKind
from onward.planning.validate import step_problems
from onward.store.leases import new_owner
from onward.tools.registry import load_tool_modules

if TYPE_CHECKING:
    from onward.client.facade import Onward
    from onward.store.database import Store


@dataclass(frozen=True, kw_only=True, slots=True)
class CancelReport:
    """What ``cancel`` did."""

    view: RunView
    compensations: list[Compensation] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every completed effect was undone (none failed, none of unknown outcome)."""
        bad = (CompensationStatus.FAILED, CompensationStatus.UNKNOWN)
        return all(c.status not in bad for c in self.compensations)


class PruneReport(BaseModel):
    """What ``prune`` removed (or, with ``dry_run``, would remove)."""

    cutoff: datetime
    dry_run: bool
    removed: list[str] = []
    """Thread ids of the finished runs removed."""
    kept: int = 0
    """Finished runs kept (newer than the cutoff, or among the ``keep_last`` newest)."""
    skipped: int = 0
    """Runs left alone because they are not finished (waiting, resumable, being driven)."""
    rows: int = 0
    """Database rows deleted from onward's tables (checkpoints not counted)."""
    artifact_bytes: int = 0
    """Bytes of artifact bodies deleted (only bodies no kept run references)."""
    db_bytes_before: int = 0
    db_bytes_after: int = 0
    vacuumed: bool = False
    """The database was VACUUMed (not when nothing was removed, or a full disk had no room
    for its new copy)."""


def cancel(
    ow: Onward, thread_id: str, *, compensate: bool, reason: str, by: str | None
) -> CancelReport:
    state = ow.state(thread_id)
    if state.status.finished and state.status is not RunStatus.CANCELLED:
        raise UsageError(
            f"run {thread_id} already finished ({state.status.value}); there is nothing to cancel"
        )
    by = by or whoami()
    owner = new_owner()
    if state.status is not RunStatus.CANCELLED:
        ow.store.events.record(thread_id, EventKind.CANCEL_REQUESTED, {"by": by, "reason": reason})
    acquire(ow.store.leases, thread_id, owner, takeover=True)
    try:
        state = ow.state(thread_id)
        if state.status.finished and state.status is not RunStatus.CANCELLED:
            # It finished while we waited for the driver: nothing to cancel or undo.
            raise UsageError(
                f"run {thread_id} finished ({state.status.value}) before the cancel took "
                "effect; nothing was cancelled or compensated"
            )
        if not state.status.finished:
            mark_cancelled(ow, thread_id, state, by, reason)
        done: list[Compensation] = []
        if compensate:
            load_tool_modules(state.tool_modules)
            done = compensate_run(thread_id, ow.store.ledger, ow.registry, ow.store.events)
    finally:
        ow.store.release_lease(thread_id, owner)
    return CancelReport(view=ow.get(thread_id), compensations=done)


def apply_requested_cancel(ow: Onward, thread_id: str) -> bool:
    """If another process asked to cancel this run, cancel it now (the caller holds the
    lease). True when a cancel was requested: the drive stops."""
    requests = ow.store.events.list(thread_id, [EventKind.CANCEL_REQUESTED])
    if not requests:
        return False
    state = ow.state(thread_id)
    if not state.status.finished:
        detail = requests[-1].detail
        mark_cancelled(
            ow, thread_id, state, detail.get("by") or "unknown", detail.get("reason") or ""
        )
    return True


def mark_cancelled(ow: Onward, thread_id: str, state: RunState, by: str, reason: str) -> None:
    why = f"cancelled by {by}" + (f": {reason}" if reason else "")
    ow.graph.update_state(
        config(thread_id),
        {
            "status": RunStatus.CANCELLED,
            "failure": RunFailure(kind=RunFailureKind.CANCELLED, message=why),
            "waiting": {k: None for k in state.waiting},
            "decisions": [
                Decision(
                    step_id="(run)",
                    action=DecisionAction.CANCEL,
                    by=by,
                    at=utcnow(),
                    reason=reason,
                )
            ],
            "messages": [
                AIMessage(
                    f"**Run cancelled**: {why}.",
                    additional_kwargs=report_marker(state, reported(state.messages)),
                )
            ],
        },
        as_node=FINALIZE,
    )
    ow.store.events.record(thread_id, EventKind.RUN_CANCELLED, {"by": by, "reason": why})
    ow.store.set_run_status(thread_id, RunStatus.CANCELLED)


def fork(
    ow: Onward,
    thread_id: str,
    checkpoint_id: str,
    edits: dict[str, Any] | None,
    *,
    new_thread_id: str | None,
    finished_ok: bool = False,
) -> str:
    """``finished_ok``: a finished run's end may be forked too (``threads.copy``): the copy
    is finished as well, ready for a follow-up message."""
    state, _ = ow.state_at(thread_id, checkpoint_id)
    if state.goal is None:
        raise UsageError(
            f"checkpoint {checkpoint_id} holds no run state yet (it is the run's input); "
            "fork from a later one"
        )
    in_flight = [s for s, r in state.steps.items() if r.status is StepStatus.RUNNING]
    if state.waiting or in_flight:
        raise UsageError(
            f"at checkpoint {checkpoint_id} an effect is in flight or its outcome unknown "
            f"({', '.join(sorted({*state.waiting, *in_flight}))}); its ledger entry belongs "
            "to the original run, so fork from a checkpoint before or after it"
        )
    load_tool_modules(state.tool_modules)
    plan = state.plan
    for path, value in (edits or {}).items():
        step_id, _, arg = path.partition(".")
        if not arg:
            raise UsageError(f"--edit {path!r}: write STEP.ARG=VALUE")
        try:
            step = plan.step(step_id)
        except KeyError:
            raise UsageError(
                f"--edit {path!r}: no step {step_id!r} in the plan at that checkpoint"
            ) from None
        if (status := state.status_of(step_id)) in (StepStatus.DONE, StepStatus.PRODUCED):
            how = (
                " (its output is produced, waiting for verify)"
                if status.value == "produced"
                else ""
            )
            raise UsageError(
                f"step {step_id!r} is already done{how} at checkpoint {checkpoint_id}; fork "
                "from an earlier checkpoint to change it"
            )
        changed = step.model_copy(update={"args": {**step.args, arg: value}})
        problems = step_problems(changed, f"step {step_id}", ow.registry, state.policy.allow_tools)
        if problems:
            raise UsageError("; ".join(map(str, problems)))
        plan = plan.with_step(changed)
    new_id = new_thread_id or str(uuid.uuid4())
    if ow.store.get_run(new_id) is not None:
        raise UsageError(f"thread id {new_id} is already used")
    forked = state.model_copy(
        update={
            "plan": plan,
            "status": RunStatus.RUNNING if not state.status.finished else state.status,
            "approvals": {},  # approvals bind to the original run's args
            "resume_at": None,
        }
    )
    if forked.status.finished and not finished_ok:
        raise UsageError(
            f"checkpoint {checkpoint_id} is the end of the run ({state.status.value}); fork "
            "from an earlier one"
        )
    objective = f"{state.goal.objective if state.goal else ''} (fork of {thread_id})"
    ow.store.add_run(new_id, objective, {"input": forked.model_dump(mode="json")})
    for ref in forked.artifacts.values():  # the fork reads them too: retention keeps them
        ow.store.use_artifact(ref.sha256, new_id)
    values = {k: getattr(forked, k) for k in type(forked).model_fields}
    ow.graph.update_state(
        config(new_id), values, as_node=FINALIZE if forked.status.finished else GATE
    )
    if forked.status.finished:
        ow.store.set_run_status(new_id, forked.status)  # nothing left to drive or recover
    ow.store.events.record(
        new_id,
        EventKind.RUN_STARTED,
        {"forked_from": thread_id, "checkpoint_id": checkpoint_id, "edits": edits or {}},
    )
    ow.store.events.record(
        thread_id, EventKind.FORKED, {"to": new_id, "checkpoint_id": checkpoint_id}
    )
    return new_id


def prune(ow: Onward, older_than: timedelta, *, keep_last: int, dry_run: bool) -> PruneReport:
    """Remove finished runs past the cutoff. It is the remedy for a full disk, so it needs
    no room first: SQLite's reserve is spent before anything is deleted, the WAL folded
    back after, VACUUM runs only if there is room for it, and the reserve is made again at
    the end if there is room (store/reserve.py)."""
    store = ow.store
    cutoff = ow.clock() - older_than
    report = PruneReport(cutoff=cutoff, dry_run=dry_run, db_bytes_before=store.size())
    if not dry_run:
        store.free_reserve()
    try:
        candidates = _remove_finished(ow, report, keep_last)
        if not dry_run:
            store.fold_back_wal()
        if report.removed and not dry_run:
            report.artifact_bytes = store.delete_unused_bodies(candidates)
            report.vacuumed = _give_back(store)
    finally:
        if not dry_run:
            store.keep_reserve()
    report.db_bytes_after = store.size()
    return report


def _remove_finished(ow: Onward, report: PruneReport, keep_last: int) -> set[str]:
    """Delete (or, dry, list) the finished runs past ``report.cutoff`` but the
    ``keep_last`` newest; returns the artifact bodies they referenced."""
    store = ow.store
    finished = store.finished_runs()  # newest first
    report.skipped = len(store.unfinished_runs())
    leases = store.leases.all()
    now = store.leases.clock()
    candidates: set[str] = set()
    for i, row in enumerate(finished):
        if i < keep_last or row.updated_at >= report.cutoff:
            report.kept += 1
            continue
        lease = leases.get(row.thread_id)
        state = ow.state(row.thread_id)
        if (
            not state.status.finished
            or ow.pending(row.thread_id)
            or (lease is not None and lease.live(now))
        ):
            report.skipped += 1  # the runs table lags the checkpoint: trust the latter
            continue
        report.removed.append(row.thread_id)
        if not report.dry_run:
            rows, shas = store.delete_run(row.thread_id)
            report.rows += rows
            candidates |= shas
    return candidates


def _give_back(store: Store) -> bool:
    """VACUUM if there is room for the database's new copy; False when there was not (the
    freed pages are reused by the next writes all the same)."""
    store.fold_back_wal()
    if not store.room_to_vacuum():
        return False
    store.vacuum()
    return True
