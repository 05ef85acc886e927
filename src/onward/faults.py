"""Fault points: the named places where a crash test may stop a production process.

Production calls :func:`reach` at each point (an effect done but not recorded, a record
written but not checkpointed...); it does nothing unless a test armed that point through
the environment (``ONWARD_FAULT_KILL=POINT:STEP`` or ``POINT:*``: the process SIGKILLs
itself there). :func:`journal` and :func:`tool_delay` are the two other crash-test aids
production calls: ``ONWARD_EXECUTION_LOG=FILE`` appends one JSON line per tool call phase
(``start`` / ``end``), written outside the checkpoint, so a test can count every execution
including ones a crash threw away; ``ONWARD_FAULT_TOOL_DELAY=SECONDS`` sleeps inside every
tool call after its ``start`` line, so a kill can land inside a tool. Tests arm them with
:mod:`onward.testing.faults`; production imports this module, never the test package.
"""

from __future__ import annotations

import json
import os
import signal
import time
from enum import StrEnum

from onward.settings import is_set, settings


class Fault(StrEnum):
    """A point ``ONWARD_FAULT_KILL`` can kill at (its value is the name a test writes)."""

    AFTER_EFFECT = "after_effect"
    """A tool's effect happened; the effect ledger has not recorded it (the worst moment)."""
    AFTER_RECORD = "after_record"
    """The ledger recorded the effect; the checkpoint holding the step's result is not saved."""
    AFTER_COMPENSATE = "after_compensate"
    """A compensation ran; the ledger has not recorded it."""
    AFTER_COMPENSATION_RECORD = "after_compensation_record"
    """Right after the ledger recorded a compensation."""
    BEFORE_VERIFY = "before_verify"
    """The verify node starts on the step: execute's writes are committed, the verdict is not."""
    INSIDE_VERIFY = "inside_verify"
    """The step's checks ran; verify's writes are not committed."""
    AFTER_ANSWERS = "after_answers"
    """Approve / escalate applied every answer of a question (the step: the question's first
    step, ``plan`` for the plan); nothing of them is committed."""


def reach(point: Fault, step_id: str) -> None:
    """Production reached ``point`` for ``step_id``: SIGKILL this process if a test armed it
    (``ONWARD_FAULT_KILL=POINT:STEP`` or ``POINT:*``), else nothing."""
    if not is_set("ONWARD_FAULT_KILL"):  # one variable checked: a step passes here often
        return
    target = settings().fault_kill
    if target and target in (f"{point.value}:{step_id}", f"{point.value}:*"):
        os.kill(os.getpid(), signal.SIGKILL)


def journal(phase: str, step_id: str, tool: str, attempt: int, thread_id: str) -> None:
    """One line of ``ONWARD_EXECUTION_LOG`` for a tool call's ``phase`` (if it is set)."""
    if not is_set("ONWARD_EXECUTION_LOG"):
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


def tool_delay() -> None:
    """Sleep ``ONWARD_FAULT_TOOL_DELAY`` inside a tool call (if it is set)."""
    if not is_set("ONWARD_FAULT_TOOL_DELAY"):
        return
    delay = settings().fault_tool_delay.total_seconds()
    if delay > 0:
        time.sleep(delay)


__all__ = ["Fault", "journal", "reach", "tool_delay"]
