"""Crash-test aids, off unless their environment variables are set.

``ONWARD_EXECUTION_LOG=FILE`` appends one JSON line per tool call phase
(``start`` / ``end``), written and flushed outside the checkpoint, so a test can
count every execution, including ones a crash later threw away.
``ONWARD_FAULT_TOOL_DELAY=SECONDS`` sleeps inside every tool call after its
``start`` line, so a SIGKILL can be aimed at the inside of a tool.
``ONWARD_FAULT_KILL=after_effect:STEP`` (or ``after_effect:*``) kills the process
between an effect and its ledger record; ``after_record:STEP`` between the ledger
record and the checkpoint. ``after_compensate:STEP`` kills between a compensation and
its ledger record, ``after_compensation_record:STEP`` right after that record.
``before_verify:STEP`` kills when the verify node starts on STEP (execute's writes are
committed, the verdict is not); ``inside_verify:STEP`` after its checks ran, before
verify's writes. ``after_answers:STEP`` kills when approve / escalate has applied every
answer of a question (STEP: its first step, ``plan`` for the plan) and nothing of them is
committed yet.
"""

from __future__ import annotations

import json
import os
import signal
import time

from onward.settings import is_set, settings


def _set(name: str) -> bool:
    """The hot path checks one variable instead of parsing them all (a step passes here
    several times); unset or blank is off, as in settings()."""
    return is_set(name)


def journal(phase: str, step_id: str, tool: str, attempt: int, thread_id: str) -> None:
    if not _set("ONWARD_EXECUTION_LOG"):
        return
    path = settings().execution_log
    if path is None:
        return
    line = json.dumps(
        {
            "phase": phase,
            "step": step_id,
            "tool": tool,
            "attempt": attempt,
            "thread": thread_id,
            "pid": os.getpid(),
            "t": time.time(),
        }
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def fault_delay() -> None:
    if not _set("ONWARD_FAULT_TOOL_DELAY"):
        return
    delay = settings().fault_tool_delay.total_seconds()
    if delay > 0:
        time.sleep(delay)


def fault_point(name: str, step_id: str) -> None:
    """``ONWARD_FAULT_KILL=after_effect:STEP`` SIGKILLs this process at that point: after
    the effect of STEP happened, before the ledger recorded it (the worst moment)."""
    if not _set("ONWARD_FAULT_KILL"):
        return
    target = settings().fault_kill
    if target and target in (f"{name}:{step_id}", f"{name}:*"):
        os.kill(os.getpid(), signal.SIGKILL)
