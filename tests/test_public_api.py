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


def test_every_error_knows_its_exit_code_and_http_status() -> None:
    """One table: the CLI exits with ``exit_code``, ``onward serve`` answers ``http_status``
    (the conventions: 2 usage, 3 stopped for a human, 4 busy)."""
    from onward import errors

    expected = {
        errors.UsageError: (2, 422),
        errors.ForbiddenError: (2, 403),
        errors.TokenError: (2, 403),
        errors.UnknownThreadError: (2, 404),
        errors.PlanValidationError: (2, 422),
        errors.StoreError: (2, 503),
        errors.StoreLockedError: (4, 503),
        errors.RunBusyError: (4, 409),
        errors.LeaseLostError: (4, 500),
        errors.InconsistentRunError: (3, 500),
        errors.LoopGuardError: (3, 500),
        errors.ArtifactError: (2, 500),
    }
    for cls, (exit_code, status) in expected.items():
        assert (cls.exit_code, cls.http_status) == (exit_code, status), cls.__name__
    too_big = errors.RequestLimitError("x", http_status=413)
    busy = errors.RequestLimitError("x", http_status=429, retry_after=5)
    assert (too_big.http_status, busy.http_status, busy.retry_after) == (413, 429, 5)
