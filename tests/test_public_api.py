"""The public names are a promise: adding one is a decision, removing one breaks users."""

from __future__ import annotations

import onward

PUBLIC = {
    "DrainRequested",
    "EncryptionKeyError",
    "PruneReport",
    "Worker",
    "WorkerPolicy",
    "WorkerReport",
    "BreakerPolicy",
    "Budget",
    "LoopGuardError",
    "NoTemplateError",
    "RetryPolicy",
    "ScriptedChatModel",
    "Usage",
    "AnswerError",
    "Approval",
    "CancelReport",
    "Deadline",
    "Decision",
    "DecisionAction",
    "ExpiryAction",
    "PendingDecision",
    "RunPolicy",
    "SweepReport",
    "TokenError",
    "WaitKind",
    "ArtifactError",
    "ArtifactRef",
    "DeterministicToolError",
    "EventKind",
    "FailureClass",
    "Goal",
    "LeaseLostError",
    "LeasePolicy",
    "Onward",
    "OnwardError",
    "Plan",
    "PlanProblem",
    "PlanStep",
    "PlanSteps",
    "PlanValidationError",
    "PlanningError",
    "ProgressEvent",
    "Reconciled",
    "Registry",
    "InconsistentRunError",
    "RunBusyError",
    "RunState",
    "RunStatus",
    "RunView",
    "SideEffect",
    "StepRecord",
    "StepRecords",
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
}


def test_public_names_are_pinned() -> None:
    assert set(onward.__all__) == PUBLIC


def test_every_public_name_is_importable() -> None:
    for name in onward.__all__:
        assert getattr(onward, name) is not None


def test_usage_errors_are_onward_errors() -> None:
    for cls in (
        onward.PlanValidationError,
        onward.PlanningError,
        onward.UnknownThreadError,
        onward.ToolLoadError,
        onward.AnswerError,
        onward.NoTemplateError,
        onward.TokenError,
    ):
        assert issubclass(cls, onward.UsageError)
        assert issubclass(cls, onward.OnwardError)
    assert issubclass(onward.StoreLockedError, onward.StoreError)
