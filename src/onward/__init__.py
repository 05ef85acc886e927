"""onward: crash-safe long agent tasks on LangGraph.

Plan, execute through tools, verify every result, resume by thread id after
any crash, without losing work or repeating a side effect.
"""

# The names load on first use (PEP 562): `import onward` and the CLI's `--help` must not
# pay for LangGraph, LangChain and pydantic models they never touch. The TYPE_CHECKING
# imports are the same names for mypy, IDEs and the API reference.

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onward.client import (
        CancelReport,
        Onward,
        PruneReport,
        RunView,
        StepView,
        SweepReport,
        load_plan_file,
    )
    from onward.client.worker import Worker, WorkerPolicy, WorkerReport
    from onward.errors import (
        AnswerError,
        ArtifactError,
        DeterministicToolError,
        DrainRequested,
        EncryptionKeyError,
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
    from onward.llm.fake import ScriptedChatModel
    from onward.llm.models import chat_model, role_models
    from onward.model.state import (
        Approval,
        ArtifactRef,
        Budget,
        Decision,
        DecisionAction,
        FailureClass,
        Goal,
        Plan,
        PlanStep,
        PlanSteps,
        RunState,
        RunStatus,
        SideEffect,
        StepRecord,
        StepRecords,
        StepStatus,
        Usage,
        WaitKind,
    )
    from onward.observe.kinds import EventKind
    from onward.observe.progress import ProgressEvent
    from onward.people.inbox import PendingDecision
    from onward.policies.retry import RetryPolicy
    from onward.policies.run import Deadline, ExpiryAction, RunPolicy
    from onward.store.breakers import BreakerPolicy
    from onward.store.database import Store
    from onward.store.leases import LeasePolicy
    from onward.tools import Reconciled, Registry, ToolContext, ToolSpec, default_registry, tool
    from onward.tools.langchain import register_langchain_tool
    from onward.tools.mcp import mcp_server

_HOMES: dict[str, tuple[str, ...]] = {
    "onward.client": (
        "CancelReport",
        "Onward",
        "PruneReport",
        "RunView",
        "StepView",
        "SweepReport",
        "load_plan_file",
    ),
    "onward.client.worker": (
        "Worker",
        "WorkerPolicy",
        "WorkerReport",
    ),
    "onward.errors": (
        "AnswerError",
        "ArtifactError",
        "DeterministicToolError",
        "DrainRequested",
        "EncryptionKeyError",
        "InconsistentRunError",
        "LeaseLostError",
        "LoopGuardError",
        "NoTemplateError",
        "OnwardError",
        "PlanningError",
        "PlanProblem",
        "PlanValidationError",
        "RunBusyError",
        "StoreCorruptError",
        "StoreError",
        "StoreLockedError",
        "TokenError",
        "ToolError",
        "ToolLoadError",
        "TransientToolError",
        "UnknownThreadError",
        "UsageError",
    ),
    "onward.graph.build": (
        "build_graph",
        "compile_graph",
    ),
    "onward.llm.fake": ("ScriptedChatModel",),
    "onward.model.state": (
        "Approval",
        "ArtifactRef",
        "Budget",
        "Decision",
        "DecisionAction",
        "FailureClass",
        "Goal",
        "Plan",
        "PlanStep",
        "PlanSteps",
        "RunState",
        "RunStatus",
        "SideEffect",
        "StepRecord",
        "StepRecords",
        "StepStatus",
        "Usage",
        "WaitKind",
    ),
    "onward.observe.kinds": ("EventKind",),
    "onward.observe.progress": ("ProgressEvent",),
    "onward.people.inbox": ("PendingDecision",),
    "onward.policies.retry": ("RetryPolicy",),
    "onward.policies.run": (
        "Deadline",
        "ExpiryAction",
        "RunPolicy",
    ),
    "onward.store.breakers": ("BreakerPolicy",),
    "onward.store.database": ("Store",),
    "onward.store.leases": ("LeasePolicy",),
    "onward.tools": (
        "Reconciled",
        "Registry",
        "ToolContext",
        "ToolSpec",
        "default_registry",
        "tool",
    ),
    "onward.tools.langchain": ("register_langchain_tool",),
    "onward.tools.mcp": ("mcp_server",),
    "onward.llm.models": ("chat_model", "role_models"),
}
"""Where each public name lives (internal modules; users import from ``onward``)."""

_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later reads are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
    "DrainRequested",
    "EncryptionKeyError",
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
    "PlanSteps",
    "PlanValidationError",
    "PlanningError",
    "ProgressEvent",
    "PruneReport",
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
    "StepRecords",
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
    "Worker",
    "WorkerPolicy",
    "WorkerReport",
    "build_graph",
    "chat_model",
    "compile_graph",
    "default_registry",
    "load_plan_file",
    "mcp_server",
    "register_langchain_tool",
    "role_models",
    "tool",
]
