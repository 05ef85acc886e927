"""Every kind of event onward writes to a run's event log, in one enum.

Progress events (streamed while a node runs, then logged) are a part of them; the rest are
written by the machinery around the graph: people's questions, leases, breakers, the
server, the worker, the lifecycle commands. The values are stored: never change one.
"""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    # progress: streamed by the nodes (observe/progress.py), logged once per step attempt
    PLAN_CREATED = "plan_created"
    PLAN_REVISED = "plan_revised"
    PLAN_FAILED = "plan_failed"
    STEP_STARTED = "step_started"
    TOOL_CALLED = "tool_called"
    VERIFIED = "verified"
    STEP_DONE = "step_done"
    STEP_FAILED = "step_failed"
    STEP_WAITING = "step_waiting"
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_DECIDED = "approval_decided"
    RUN_FINISHED = "run_finished"
    # the run's life
    RUN_STARTED = "run_started"
    RUN_RESUMED = "run_resumed"
    RUN_SUSPENDED = "run_suspended"
    CANCEL_REQUESTED = "cancel_requested"
    RUN_CANCELLED = "run_cancelled"
    FORKED = "forked"
    STATE_UPDATED = "state_updated"
    DRAINED = "drained"
    LOOP_GUARD = "loop_guard"
    """A drive stopped after more supersteps than any plan needs."""
    STEP_RUNNING = "step_running"
    """A step still running a moment after it started, written at once (not with the
    node's writes, which commit when the step ends), so readers can show it running."""
    # what the nodes decide besides progress
    RETRY_SCHEDULED = "retry_scheduled"
    BUDGET_WARNING = "budget_warning"
    MODEL_CALL = "model_call"
    APPROVAL_MISMATCH = "approval_mismatch"
    """Execute refused a step whose args differ from the approved ones."""
    COMPENSATED = "compensated"
    COMPENSATION_FAILED = "compensation_failed"
    # people's questions over time
    APPROVAL_REMINDER = "approval_reminder"
    APPROVAL_EXPIRED = "approval_expired"
    # who drives the run
    LEASE_ACQUIRED = "lease_acquired"
    LEASE_TAKEN_OVER = "lease_taken_over"
    LEASE_RELEASED = "lease_released"
    ADOPTED = "adopted"
    """A queued run whose worker's lease expired went back to the queue."""
    WORKER_ERROR = "worker_error"
    # services' circuit breakers
    BREAKER_OPENED = "breaker_opened"
    BREAKER_HALF_OPEN = "breaker_half_open"
    BREAKER_CLOSED = "breaker_closed"
    # the HTTP server
    API_RUN_STARTED = "api_run_started"
    API_RUN_RECOVERED = "api_run_recovered"
    API_RUN_CANCELLED = "api_run_cancelled"
    """An API run stopped by ``runs.cancel`` (its ``action``: interrupt or rollback)."""
    STATELESS_THREAD = "stateless_thread"
    """The thread of a stateless run, deleted once the run ended (``on_completion``
    delete): the server's recovery sweep deletes it when the server stopped first."""
    WEBHOOK_SENT = "webhook_sent"
    """An API run's webhook was called when the run ended (its answer, or why it failed)."""


ONCE_FIELDS: dict[EventKind, tuple[str, ...]] = {
    EventKind.PLAN_CREATED: ("version",),
    EventKind.PLAN_REVISED: ("version",),
    EventKind.STEP_STARTED: ("step_id", "attempt"),
    EventKind.TOOL_CALLED: ("step_id", "attempt"),
    EventKind.VERIFIED: ("step_id", "attempt"),
    EventKind.STEP_DONE: ("step_id", "attempt"),
    EventKind.STEP_FAILED: ("step_id", "attempt"),
    EventKind.APPROVAL_REQUESTED: ("ask_key",),
    EventKind.APPROVAL_DECIDED: ("ask_key",),
    EventKind.RUN_FINISHED: (),
}
"""Events that happen once per these fields: a node that runs again after a crash (or a
question asked again on resume) does not log them twice. Their rows carry a dedupe key
(``step_done:s3:1``: the kind, then these fields' values); every other kind's rows none,
which the event log's index of kinds relies on (onward.observe.events)."""
