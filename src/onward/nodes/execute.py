"""execute: run one step's tool (one ``Send`` per ready step).

Input artifacts are loaded and their sha256 verified first; args are resolved
and validated against the tool's schema; the tool runs under its timeout.
Every exception becomes a classified ``StepFailure`` on the step record; none
escapes. The step stays ``running`` until verify has judged its output.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig

from onward import diagnostics, refs
from onward.errors import ArtifactError
from onward.failures import classify
from onward.nodes.deps import NodeDeps
from onward.progress import EventKind, emit
from onward.state import ExecuteTask, StepStatus, transition, utcnow
from onward.tools.registry import ToolContext, ToolSpec, load_tool_modules


def _call(spec: ToolSpec, args: Any, ctx: ToolContext) -> Any:
    diagnostics.fault_delay()
    return spec.call(args, ctx)


def _call_with_timeout(spec: ToolSpec, args: Any, ctx: ToolContext) -> Any:
    if spec.timeout is None:
        return _call(spec, args, ctx)
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"onward-{spec.name}")
    try:
        future = pool.submit(_call, spec, args, ctx)
        try:
            return future.result(timeout=spec.timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(
                f"tool {spec.name!r} did not finish within {spec.timeout:g}s"
            ) from None
    finally:
        pool.shutdown(wait=False)


def _jsonable(value: Any) -> Any:
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


def make_execute_node(deps: NodeDeps) -> Any:
    def execute(task: ExecuteTask, config: RunnableConfig) -> dict[str, Any]:
        step, attempt = task.step, task.record.attempts + 1
        thread_id = str(config.get("configurable", {}).get("thread_id", ""))
        started = utcnow()
        emit(EventKind.STEP_STARTED, step_id=step.id, tool=step.tool, attempt=attempt)
        try:
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
            diagnostics.journal("start", step.id, step.tool, attempt, thread_id)
            output = _call_with_timeout(spec, args, ctx)
            diagnostics.journal("end", step.id, step.tool, attempt, thread_id)
            ref = deps.artifacts.put(step.output or f"step:{step.id}", _jsonable(output))
            record = transition(
                task.record,
                StepStatus.RUNNING,
                attempts=attempt,
                output=ref,
                failure=None,
                findings=[],
                started_at=started,
                ended_at=utcnow(),
            )
        except Exception as exc:
            record = transition(
                task.record,
                StepStatus.RUNNING,
                attempts=attempt,
                output=None,
                failure=classify(exc),
                findings=[],
                started_at=started,
                ended_at=utcnow(),
            )
        return {"steps": {step.id: record}}

    return execute
