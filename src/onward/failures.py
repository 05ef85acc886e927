"""Exceptions of a step → a classified StepFailure (the routing after verify reads the class)."""

from __future__ import annotations

from pydantic import ValidationError

from onward.errors import DeterministicToolError, ToolError, TransientToolError
from onward.state import FailureClass, StepFailure

_TRANSIENT: tuple[type[BaseException], ...] = (TimeoutError, ConnectionError)


def classify(exc: BaseException) -> StepFailure:
    """Typed tool errors say their class; otherwise transient for timeouts and connection
    errors, deterministic for everything else (programming errors are never retried blindly)."""
    if isinstance(exc, TransientToolError) or (
        isinstance(exc, _TRANSIENT) and not isinstance(exc, ToolError)
    ):
        cls = FailureClass.TRANSIENT
    else:
        cls = FailureClass.DETERMINISTIC
    message = str(exc) or type(exc).__name__
    if isinstance(exc, ValidationError):
        message = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'args'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
    hint = exc.hint if isinstance(exc, DeterministicToolError) else None
    return StepFailure(failure_class=cls, message=message, error_type=type(exc).__name__, hint=hint)
