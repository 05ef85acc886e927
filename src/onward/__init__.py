"""onward: crash-safe long agent tasks on LangGraph.

Plan, execute through tools, verify every result, resume by thread id after
any crash, without losing work or repeating a side effect.
"""

from onward.api import CancelReport, Onward, RunView, StepView, SweepReport, load_plan_file
from onward.checkpointing.breakers import BreakerPolicy
from onward.checkpointing.leases import LeasePolicy
from onward.checkpointing.store import Store
from onward.errors import (
    AnswerError,
    ArtifactError,
    DeterministicToolError,
    InconsistentRunError,
    LeaseLostError,
    LoopGuardError,
    NoTemplateError,
    OnwardError,
    PlanningError,
    PlanProblem,
    PlanValidationError,
    RunBusyError,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    TokenError,
    ToolError,
    ToolLoadError,
    TransientToolError,
    UnknownThreadError,
    UsageError,
)
from onward.graph.build import build_graph, compile_graph
from onward.inbox import PendingDecision
from onward.llm.fake import ScriptedChatModel
from onward.policy import Deadline, ExpiryAction, RunPolicy
from onward.progress import EventKind, ProgressEvent
from onward.retry import RetryPolicy
from onward.state import (
    Approval,
    ArtifactRef,
    Budget,
    Decision,
    DecisionAction,
    FailureClass,
    Goal,
    Plan,
    PlanStep,
    RunState,
    RunStatus,
    SideEffect,
    StepRecord,
    StepStatus,
    Usage,
    WaitKind,
)
from onward.tools import Reconciled, Registry, ToolContext, ToolSpec, default_registry, tool

__all__ = [
    "AnswerError",
    "Approval",
    "ArtifactError",
    "ArtifactRef",
    "BreakerPolicy",
    "Budget",
    "CancelReport",
    "Deadline",
    "Decision",
    "DecisionAction",
    "DeterministicToolError",
    "EventKind",
    "ExpiryAction",
    "FailureClass",
    "Goal",
    "InconsistentRunError",
    "LeaseLostError",
    "LeasePolicy",
    "LoopGuardError",
    "NoTemplateError",
    "Onward",
    "OnwardError",
    "PendingDecision",
    "Plan",
    "PlanProblem",
    "PlanStep",
    "PlanValidationError",
    "PlanningError",
    "ProgressEvent",
    "Reconciled",
    "Registry",
    "RetryPolicy",
    "RunBusyError",
    "RunPolicy",
    "RunState",
    "RunStatus",
    "RunView",
    "ScriptedChatModel",
    "SideEffect",
    "StepRecord",
    "StepStatus",
    "StepView",
    "Store",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "SweepReport",
    "TokenError",
    "ToolContext",
    "ToolError",
    "ToolLoadError",
    "ToolSpec",
    "TransientToolError",
    "UnknownThreadError",
    "Usage",
    "UsageError",
    "WaitKind",
    "build_graph",
    "compile_graph",
    "default_registry",
    "load_plan_file",
    "tool",
]
