"""onward: crash-safe long agent tasks on LangGraph.

Plan, execute through tools, verify every result, resume by thread id after
any crash, without losing work or repeating a side effect.
"""

from onward.api import Onward, RunView, StepView, load_plan_file
from onward.checkpointing.leases import LeasePolicy
from onward.checkpointing.store import Store
from onward.errors import (
    ArtifactError,
    DeterministicToolError,
    InconsistentRunError,
    LeaseLostError,
    OnwardError,
    PlanningError,
    PlanProblem,
    PlanValidationError,
    RunBusyError,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    ToolError,
    ToolLoadError,
    TransientToolError,
    UnknownThreadError,
    UsageError,
)
from onward.graph.build import build_graph, compile_graph
from onward.progress import EventKind, ProgressEvent
from onward.state import (
    ArtifactRef,
    FailureClass,
    Goal,
    Plan,
    PlanStep,
    RunState,
    RunStatus,
    SideEffect,
    StepRecord,
    StepStatus,
)
from onward.tools import Reconciled, Registry, ToolContext, ToolSpec, default_registry, tool

__all__ = [
    "ArtifactError",
    "ArtifactRef",
    "DeterministicToolError",
    "EventKind",
    "FailureClass",
    "Goal",
    "InconsistentRunError",
    "LeaseLostError",
    "LeasePolicy",
    "Onward",
    "OnwardError",
    "Plan",
    "PlanProblem",
    "PlanStep",
    "PlanValidationError",
    "PlanningError",
    "ProgressEvent",
    "Reconciled",
    "Registry",
    "RunBusyError",
    "RunState",
    "RunStatus",
    "RunView",
    "SideEffect",
    "StepRecord",
    "StepStatus",
    "StepView",
    "Store",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "ToolContext",
    "ToolError",
    "ToolLoadError",
    "ToolSpec",
    "TransientToolError",
    "UnknownThreadError",
    "UsageError",
    "build_graph",
    "compile_graph",
    "default_registry",
    "load_plan_file",
    "tool",
]
