"""execute: run one step (one ``Send`` per ready step) and save its output as produced.

Input artifacts are loaded and their sha256 verified first; args are resolved and
validated against the tool's schema; the tool runs under its timeout, through the
side-effect protocol. The output is saved as *produced*, not done: the verify node
decides (nodes/verify.py), so a crash after this task's writes commit resumes at verify
without calling the tool again. Every exception becomes a classified ``StepFailure``,
but three that are no step's failure end the drive: a full disk (``DiskFullError``: the
run is suspended, verification/failures.py), a lost lease (``LeaseLostError``: a fenced
write such as the effect's ledger claim was refused, so this driver stops at once), and a
database gone mid-protocol (``DatabaseUnavailable``: the drive is retried once it answers).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime

from onward import faults
from onward.effects.protocol import perform
from onward.errors import (
    AnswerRecorded,
    ArtifactError,
    DatabaseUnavailable,
    LeaseLostError,
    OutcomeUnknown,
    StoreError,
)
from onward.model import references
from onward.model.state import (
    ExecuteTask,
    FailureClass,
    RunUpdate,
    SideEffect,
    StepRecord,
    StepStatus,
    Waiting,
    transition,
    utcnow,
)
from onward.nodes.deps import NodeDeps, thread_of, workdir_path
from onward.observe.kinds import EventKind
from onward.observe.progress import emit
from onward.people.approvals import step_hash
from onward.policies.retry import DEFAULT_RETRY
from onward.store.artifacts import canonical_json
from onward.store.breakers import BreakerPolicy
from onward.tools.registry import Previous, ToolContext, ToolSpec, load_tool_modules
from onward.verification.failures import classify, settle, shelved

if TYPE_CHECKING:
    from onward.llm.stepmodel import StepModel
    from onward.llm.toolloop import StepTools


def _call(spec: ToolSpec, args: Any, ctx: ToolContext) -> Any:
    faults.tool_delay()
    return spec.call(args, ctx)


class _DaemonPool:
    """Worker threads that never keep the process alive. A call abandoned at its timeout may
    hang forever (Python cannot kill a thread), and ThreadPoolExecutor joins its workers at
    exit, so one hung tool would hang the process. Idle workers are reused (starting a
    thread per call is a noticeable part of a short step); a new one starts when none is
    idle."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Any, tuple[Any, ...]]]
        self._queue = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, fn: Any, *args: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._idle:
                self._idle -= 1
            else:
                threading.Thread(target=self._work, name="onward-tool", daemon=True).start()
        self._queue.put((future, fn, args))
        return future

    def _work(self) -> None:
        while True:
            future, fn, args = self._queue.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:
                    future.set_exception(exc)
            with self._lock:
                self._idle += 1


_POOL = _DaemonPool()
_log = logging.getLogger(__name__)


LONG = 0.5
"""Seconds after which a step still running is made visible (:func:`_show_running`)."""


def _call_with_timeout(
    spec: ToolSpec, args: Any, ctx: ToolContext, on_long: Callable[[], None] = lambda: None
) -> Any:
    """The tool's call under its timeout, on a worker thread; ``on_long`` runs once if it
    takes over LONG. A tool without a timeout runs on the step's own thread (no hand-off:
    docs/tools.md), so nothing watches it: it is seen running only by its effect's claim."""
    if spec.timeout is None:
        return _call(spec, args, ctx)
    seconds = spec.timeout.total_seconds()
    future = _POOL.submit(_call, spec, args, ctx)
    rest = seconds
    try:
        if seconds > LONG:
            try:
                return future.result(timeout=LONG)
            except concurrent.futures.TimeoutError:
                on_long()
            rest = seconds - LONG
        return future.result(timeout=rest)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"tool {spec.name!r} did not finish within {seconds:g}s") from None


def _show_running(deps: NodeDeps, task: ExecuteTask, thread_id: str, attempt: int) -> None:
    """A step that runs for a while is shown as it is: what the saver deferred (the
    previous step's verdict) is committed, and a ``step_running`` event is written at once.
    Steps shorter than LONG cost nothing of this; their one commit says it all."""
    detail = {"step_id": task.step.id, "tool": task.step.tool, "attempt": attempt}
    try:
        # One commit: the deferred rows and the event (make_durable_with).
        row = (utcnow(), str(EventKind.STEP_RUNNING), detail, None)
        if deps.held is not None and deps.held.make_durable_with(thread_id, [row]):
            return
        if deps.events is not None:
            deps.events.record(thread_id, EventKind.STEP_RUNNING, detail)
    except StoreError as exc:  # only what readers see is late; the step's commit decides
        _log.warning("step %s: could not record that it runs: %s", task.step.id, exc)


# `task: Any`, not `ExecuteTask`: LangGraph would add the annotated model's fields to the
# graph as channels. The Send payload arrives as is.
def execute(task: Any, config: RunnableConfig, runtime: Runtime[NodeDeps]) -> RunUpdate:
    assert isinstance(task, ExecuteTask)
    model = _step_model(runtime.context, task, thread_of(config))
    update = _execute(task, config, runtime, model)
    if model is not None and model.spent.calls:
        # What the step's model calls cost (model steps), failed ones too: in the run's
        # usage with the step's writes.
        update["usage"] = model.spent
    if task.wave_in_state:
        # The state holds this wave's size already: the write would change nothing, and
        # cost a write row per step (the routing after execute reads the same value).
        update.pop("wave", None)
    return update


def _step_model(deps: NodeDeps, task: ExecuteTask, thread_id: str) -> StepModel | None:
    """The run's model as the step may call it (``ctx.model``), or None without one."""
    if deps.model is None:
        return None
    from onward.llm.stepmodel import step_model  # a run with a model has it loaded

    return step_model(deps, thread_id, task.step.id)


def _step_tools(
    deps: NodeDeps, task: ExecuteTask, spec: ToolSpec | None, thread_id: str, attempt: int
) -> StepTools | None:
    """What a tool that calls tools itself (``calls_tools``: a tool-calling step) calls
    them with: the run's policy and execute's timed call; None for other tools."""
    if spec is None or not spec.calls_tools:
        return None
    from onward.llm.toolloop import StepTools

    def call(inner: ToolSpec, args: Any, ctx: ToolContext) -> Any:
        return _call_with_timeout(
            inner, args, ctx, lambda: _show_running(deps, task, thread_id, attempt)
        )

    return StepTools(deps=deps, policy=task.policy, call=call)


def _calls(tools: StepTools | None) -> dict[str, Any]:
    """The record's ``calls`` update: a tool-calling step's calls so far, else nothing."""
    return {} if tools is None else {"calls": list(tools.shown)}


def _previous(deps: NodeDeps, record: StepRecord) -> Previous | None:
    """The output the verifier failed last time and its findings (``ctx.previous``)."""
    output, findings = record.output, record.findings
    if output is None or not findings:
        return None
    return Previous(findings=tuple(findings), load=lambda: deps.artifacts.get(output))


def _execute(
    task: ExecuteTask,
    config: RunnableConfig,
    runtime: Runtime[NodeDeps],
    model: StepModel | None = None,
) -> RunUpdate:
    deps = runtime.context
    step, attempt = task.step, task.record.attempts + 1
    thread_id = thread_of(config)
    if task.approval_required:
        refused = _refuse_unapproved(deps, task, thread_id)
        if refused is not None:
            return refused
    load_tool_modules(task.tool_modules)
    spec = deps.registry.get(step.tool)
    service = spec.service_for(step.args) if spec else None
    caller = f"{thread_id}/{step.id}/{attempt}"
    if spec is not None and service and deps.breakers is not None:
        until = deps.breakers.acquire(service, spec.breaker or BreakerPolicy(), thread_id, caller)
        if until is not None:
            # Not a failure and not an attempt: the service is resting; try later.
            emit(
                EventKind.STEP_WAITING,
                step_id=step.id,
                tool=step.tool,
                message=f"deferred: the breaker of {service} is open until {until:%H:%M:%S}",
            )
            deferred = task.record.model_copy(update={"not_before": until})
            return {"steps": {step.id: deferred}, "wave": task.wave}
    tools = _step_tools(deps, task, spec, thread_id, attempt)
    started = utcnow()
    digest = hashlib.sha256(canonical_json(step.args)).hexdigest()[:16]
    emit(
        EventKind.STEP_STARTED,
        step_id=step.id,
        tool=step.tool,
        attempt=attempt,
        detail={"args_digest": digest},
    )
    clock = time.monotonic()
    running = transition(
        task.record,
        StepStatus.RUNNING,
        attempts=attempt,
        output=None,
        failure=None,
        findings=[],
        started_at=started,
        not_before=None,
        history=shelved(task.record),
        **_calls(tools),
    )
    try:
        try:
            with _slot(service, spec.max_concurrent if spec else None):
                output, key = _run_tool(deps, task, thread_id, attempt, model, tools)
        except BaseException as exc:
            if not isinstance(exc, GraphBubbleUp | AnswerRecorded):  # a person's turn: no end
                call = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                _called_event(step.id, step.tool, attempt, digest, clock, call)
            raise
        ref = deps.artifacts.put(step.output or f"step:{step.id}", output, owner=thread_id)
        _called_event(
            step.id,
            step.tool,
            attempt,
            digest,
            clock,
            {"summary": ref.summary, "effect_key": key},
        )
        produced = transition(
            running,
            StepStatus.PRODUCED,
            output=ref,
            ended_at=utcnow(),
            effect_key=key,
            **_calls(tools),
        )
        _breaker_saw(deps, spec, service, True, thread_id, caller)
        # Saved as produced; the verify node decides done or failed.
        return {"steps": {step.id: produced}, "wave": task.wave}
    except OutcomeUnknown as unknown:
        # Not a failure: the step stays running, and the run waits for a human.
        _breaker_saw(deps, spec, service, True, thread_id, caller)
        emit(
            EventKind.STEP_WAITING,
            step_id=step.id,
            tool=step.tool,
            attempt=attempt,
            message=str(unknown),
        )
        waiting = Waiting(
            step_id=step.id,
            reason=str(unknown),
            key=unknown.key,
            args=step.args,
            started_at=unknown.started_at,
        )
        return {
            "steps": {step.id: running.model_copy(update={"effect_key": unknown.key})},
            "waiting": {step.id: waiting},
            "wave": task.wave,
        }
    except (LeaseLostError, DatabaseUnavailable, GraphBubbleUp, AnswerRecorded):
        # Not the tool's failure: another driver holds the run (nothing more of ours may be
        # written), or the database went away mid-protocol (the drive is retried from its
        # last saved step once it answers; a ledger claim found started then is re-called),
        # or a tool-calling step waits for a person inside (an interrupt), or stops once a
        # person's answer is recorded (approve --no-continue).
        raise
    except Exception as exc:
        failure = classify(exc, tool=step.tool, retry_on=spec.retry_on if spec else ())
        # Every call settles the breaker (a half-open probe must report back): only a
        # transient failure counts against the service.
        transient = failure.failure_class is FailureClass.TRANSIENT
        _breaker_saw(deps, spec, service, not transient, thread_id, caller)
        record = transition(
            running, StepStatus.FAILED, failure=failure, ended_at=utcnow(), **_calls(tools)
        )
    policy = step.retry or (spec.retry if spec else None) or DEFAULT_RETRY
    before = task.record.model_copy(update={"attempts": attempt})
    record = settle(record, before, policy, task.max_replans, step.tool)
    emit(
        EventKind.STEP_FAILED,
        step_id=step.id,
        tool=step.tool,
        attempt=attempt,
        message=record.failure.message if record.failure else "failed",
        detail={"duration": round(time.monotonic() - clock, 6)}
        | ({"failure_class": record.failure.failure_class.value} if record.failure else {}),
    )
    return {"steps": {step.id: record}, "wave": task.wave}


def _called_event(
    step_id: str, tool: str, attempt: int, digest: str, clock: float, extra: dict[str, Any]
) -> None:
    detail = {"args_digest": digest, "duration": round(time.monotonic() - clock, 6), **extra}
    emit(EventKind.TOOL_CALLED, step_id=step_id, tool=tool, attempt=attempt, detail=detail)


def _refuse_unapproved(deps: NodeDeps, task: ExecuteTask, thread_id: str) -> RunUpdate | None:
    """The args about to run must be exactly the approved ones (state may have been edited
    after the approval). If not: run nothing, audit both hashes, and ask again."""
    current = step_hash(task.step, task.inputs)
    approved = task.approval.args_hash if task.approval else None
    if approved == current:
        return None
    why = (
        "no approval on record"
        if approved is None
        else f"args hash {current[:12]}… differs from the approved {approved[:12]}…"
    )
    if deps.events is not None:
        deps.events.record(
            thread_id,
            EventKind.APPROVAL_MISMATCH,
            {
                "step_id": task.step.id,
                "tool": task.step.tool,
                "approved_hash": approved,
                "current_hash": current,
                "approved_by": task.approval.by if task.approval else None,
                "args": task.step.args,
            },
        )
    emit(
        EventKind.STEP_WAITING,
        step_id=task.step.id,
        tool=task.step.tool,
        message=f"refused to run: {why}; asking for approval again",
    )
    return {"approvals": {task.step.id: None}, "wave": task.wave}


_SLOTS: dict[str, threading.BoundedSemaphore] = {}
_SLOTS_LOCK = threading.Lock()


_UNLIMITED: AbstractContextManager[object] = nullcontext()
"""The slot of a call without a concurrency limit (reusable: it holds nothing)."""


def _slot(service: str | None, limit: int | None) -> AbstractContextManager[object]:
    """At most ``limit`` concurrent calls to ``service`` in this process: the service's
    semaphore, held for the call. A plain function, not a generator context manager: most
    tools have no limit, and building a generator per call was overhead of every step."""
    if not service or not limit:
        return _UNLIMITED
    with _SLOTS_LOCK:
        return _SLOTS.setdefault(service, threading.BoundedSemaphore(limit))


def _breaker_saw(
    deps: NodeDeps,
    spec: ToolSpec | None,
    service: str | None,
    ok: bool,
    thread_id: str,
    caller: str,
) -> None:
    if spec is not None and service and deps.breakers is not None:
        deps.breakers.record(service, ok, spec.breaker or BreakerPolicy(), thread_id, caller)


def _run_tool(
    deps: NodeDeps,
    task: ExecuteTask,
    thread_id: str,
    attempt: int,
    model: StepModel | None,
    tools: StepTools | None = None,
) -> tuple[Any, str | None]:
    """Resolve and validate args (inputs sha256-checked), then perform the tool's call
    through the side-effect protocol; returns (output, idempotency key)."""
    step = task.step
    spec = deps.registry.get(step.tool)
    if spec is None:
        raise LookupError(
            f"tool {step.tool!r} is not registered in this process; pass the --tools "
            "module that defines it"
        )

    def value_of(name: str) -> Any:
        if name not in task.inputs:
            raise ArtifactError(f"input artifact {name!r} of step {step.id!r} is missing")
        return deps.artifacts.get(task.inputs[name])

    args = spec.args_model.model_validate(references.resolve(step.args, value_of))
    ctx = ToolContext(
        thread_id=thread_id,
        step_id=step.id,
        attempt=attempt,
        workdir=workdir_path(task.workdir),
        confined=task.confine_paths,
        artifacts=deps.artifacts,
        model=model,
        previous=_previous(deps, task.record),
        tools=tools,
    )
    if spec.side_effect is not SideEffect.PURE and deps.held is not None:
        # An effect must never come before the verdicts it follows: commit what the saver
        # deferred (the previous step's verify) first.
        deps.held.make_durable()

    def call(spec: ToolSpec, args: Any, ctx: ToolContext) -> Any:
        return _call_with_timeout(
            spec, args, ctx, lambda: _show_running(deps, task, thread_id, attempt)
        )

    return perform(spec, args, ctx, deps.ledger, call)
