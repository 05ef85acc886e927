"""The Python API's former home, kept so ``from onward.api import ...`` goes on working:
the code lives in :mod:`onward.client`."""

from onward.client import (
    MIN_SUPERSTEPS,
    RECURSION_LIMIT,
    CancelReport,
    Onward,
    PruneReport,
    RunView,
    StepView,
    SweepReport,
    load_plan_file,
    superstep_limit,
    whoami,
)

__all__ = [
    "MIN_SUPERSTEPS",
    "RECURSION_LIMIT",
    "CancelReport",
    "Onward",
    "PruneReport",
    "RunView",
    "StepView",
    "SweepReport",
    "load_plan_file",
    "superstep_limit",
    "whoami",
]
