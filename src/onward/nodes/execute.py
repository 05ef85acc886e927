"""execute: run one step (one ``Send`` per ready step) and verify its output.

Input artifacts are loaded and their sha256 verified first; args are resolved
and validated against the tool's schema; the tool runs under its timeout; then
the verifier's checks decide done or failed, all before the task's writes
commit. Every exception becomes a classified ``StepFailure``; none escapes.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig

from onward import diagnostics, refs
from onward.approvals import step_hash
from onward.checkpointing.events import AuditKind
from onward.effects import perform
from onward.errors import ArtifactError, OutcomeUnknown
from onward.failures import classify
from onward.nodes.deps import NodeDeps
from onward.nodes.verify import verify_step
from onward.progress import EventKind, emit
from onward.state import ExecuteTask, StepStatus, Waiting, transition, utcnow
from onward.tools.registry import ToolContext, ToolSpec, load_tool_modules


def _call(spec: ToolSpec, args: Any, ctx: ToolContext) -> Any:
    diagnostics.fault_delay()
    return spec.call(args, ctx)


# One shared pool: a pool per call cost ~2 ms a step. A timed-out call keeps its worker
# until the tool returns (Python cannot kill a thread), so the pool is generous.
_POOL = concurrent.futures.ThreadPoolExecutor(64, thread_name_prefix="onward-tool")


def _call_with_timeout(spec: ToolSpec, args: Any, ctx: ToolContext) -> Any:
    if spec.timeout is None:
        return _call(spec, args, ctx)
    future = _POOL.submit(_call, spec, args, ctx)
    try:
        return future.result(timeout=spec.timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"tool {spec.name!r} did not finish within {spec.timeout:g}s") from None


def make_execute_node(deps: NodeDeps) -> Any:
    # `task: Any`, not `ExecuteTask`: LangGraph would add the annotated model's fields to the
    # graph as channels. The Send payload arrives as is.
    def execute(task: Any, config: RunnableConfig) -> dict[str, Any]:
        assert isinstance(task, ExecuteTask)
        step, attempt = task.step, task.record.attempts + 1
        thread_id = str(config.get("configurable", {}).get("thread_id", ""))
        if task.approval_required:
            refused = _refuse_unapproved(deps, task, thread_id)
            if refused is not None:
                return refused
        started = utcnow()
        emit(EventKind.STEP_STARTED, step_id=step.id, tool=step.tool, attempt=attempt)
        running = transition(
            task.record,
            StepStatus.RUNNING,
            attempts=attempt,
            output=None,
            failure=None,
            findings=[],
            started_at=started,
        )
        try:
            output, key = _run_tool(deps, task, thread_id, attempt)
            ref = deps.artifacts.put(step.output or f"step:{step.id}", output)
            executed = running.model_copy(
                update={"output": ref, "ended_at": utcnow(), "effect_key": key}
            )
            record = verify_step(deps, task, executed, output)
        except OutcomeUnknown as unknown:
            # Not a failure: the step stays running, and the run waits for a human.
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
        except Exception as exc:
            failure = classify(exc)
            record = transition(running, StepStatus.FAILED, failure=failure, ended_at=utcnow())
        updates: dict[str, Any] = {"steps": {step.id: record}, "wave": task.wave}
        done = record.status is StepStatus.DONE
        if done and step.output and record.output is not None:
            updates["artifacts"] = {step.output: record.output}
        emit(
            EventKind.STEP_DONE if done else EventKind.STEP_FAILED,
            step_id=step.id,
            tool=step.tool,
            attempt=attempt,
            message=(record.output.summary if record.output else "")
            if done
            else (record.failure.message if record.failure else "failed"),
        )
        return updates

    return execute


def _refuse_unapproved(deps: NodeDeps, task: ExecuteTask, thread_id: str) -> dict[str, Any] | None:
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
            AuditKind.APPROVAL_MISMATCH,
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


def _run_tool(
    deps: NodeDeps, task: ExecuteTask, thread_id: str, attempt: int
) -> tuple[Any, str | None]:
    """Resolve and validate args (inputs sha256-checked), then perform the tool's call
    through the side-effect protocol; returns (output, idempotency key)."""
    step = task.step
    load_tool_modules(task.tool_modules)
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

    args = spec.args_model.model_validate(refs.resolve(step.args, value_of))
    ctx = ToolContext(
        thread_id=thread_id, step_id=step.id, attempt=attempt, workdir=Path(task.workdir)
    )
    return perform(spec, args, ctx, deps.ledger, _call_with_timeout)
