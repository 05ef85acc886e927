"""Arming the fault points of :mod:`onward.faults` for a crash test.

Production calls the points (:func:`onward.faults.reach`, ``journal``, ``tool_delay``);
a test arms them for the process it starts, through that process's environment:
:func:`kill_at` (SIGKILL at a point), :func:`tool_delay` (sleep inside every tool call)
and :func:`execution_log` (a JSON line per tool call phase).
"""

from __future__ import annotations

from datetime import timedelta
from os import PathLike

from onward.faults import Fault


def kill_at(point: Fault, step_id: str = "*") -> dict[str, str]:
    """The environment that SIGKILLs a process when it reaches ``point`` for ``step_id``
    (``*``: for any step)."""
    if not step_id:
        raise ValueError("a fault point needs a step id or '*'")
    return {"ONWARD_FAULT_KILL": f"{Fault(point).value}:{step_id}"}


def tool_delay(delay: timedelta | float) -> dict[str, str]:
    """The environment that makes every tool call sleep ``delay`` after its start line."""
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    return {"ONWARD_FAULT_TOOL_DELAY": str(seconds)}


def execution_log(path: str | PathLike[str]) -> dict[str, str]:
    """The environment that appends a JSON line per tool call phase to ``path``."""
    return {"ONWARD_EXECUTION_LOG": str(path)}


__all__ = ["Fault", "execution_log", "kill_at", "tool_delay"]
