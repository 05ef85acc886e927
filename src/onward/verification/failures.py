"""Failures: an exception or finding of a step → a classified ``StepFailure`` with evidence.

The class decides the route (graph/routes.py, the route table): transient → retry with backoff;
deterministic → replan rules, else a person; validation → replan with the
verifier's findings; non_convergent → a person. Programming errors are
deterministic: never retried blindly. A full disk is no class of the step's: ``classify``
raises :class:`~onward.errors.DiskFullError`, which ends the drive as the store's own full
disk does (the run suspended, the step run again by ``onward resume`` once there is room).
"""

from __future__ import annotations

import re
import socket
import urllib.error

from pydantic import ValidationError

from onward.errors import DeterministicToolError, DiskFullError, ToolError, TransientToolError
from onward.model.state import (
    HISTORY_KEPT,
    FailureClass,
    StepFailure,
    StepRecord,
    StepStatus,
    utcnow,
)
from onward.policies.retry import RetryPolicy
from onward.store.reserve import full_disk
from onward.store.sql import FULL_HINT

_TRANSIENT: tuple[type[BaseException], ...] = (TimeoutError, ConnectionError, socket.timeout)


def _http_status(exc: BaseException) -> int | None:
    if isinstance(exc, urllib.error.HTTPError):
        return int(exc.code)
    for attr in ("status_code", "status"):  # httpx / requests style errors
        response = getattr(exc, "response", None)
        code = getattr(response, attr, None) if response is not None else None
        if isinstance(code, int):
            return code
    return None


def classify(
    exc: BaseException, *, tool: str = "", retry_on: tuple[type[BaseException], ...] = ()
) -> StepFailure:
    """Typed tool errors say their class. Otherwise: timeouts, connection errors, HTTP 429
    and 5xx and the tool's ``retry_on`` types are transient; everything else (ValueError,
    KeyError, FileNotFoundError, PermissionError, validation errors, other 4xx, bugs) is
    deterministic. A full disk (``ENOSPC``/``EDQUOT`` behind the error, or the store's
    :class:`DiskFullError`) is raised as a DiskFullError instead: no class fits it."""
    _raise_if_disk_full(exc, tool)
    status = _http_status(exc)
    if isinstance(exc, TransientToolError):
        cls = FailureClass.TRANSIENT
    elif isinstance(exc, ToolError):
        cls = FailureClass.DETERMINISTIC
    elif status is not None:
        cls = (
            FailureClass.TRANSIENT if status == 429 or status >= 500 else FailureClass.DETERMINISTIC
        )
    elif isinstance(exc, _TRANSIENT + tuple(retry_on)) or (
        isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError)
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
    return failure(cls, message, tool=tool, error_type=type(exc).__name__, hint=hint)


def _raise_if_disk_full(exc: BaseException, tool: str) -> None:
    if isinstance(exc, DiskFullError):
        raise exc
    full = full_disk(exc)
    if full is None:
        return
    where = f" ({full.filename})" if full.filename else ""
    raise DiskFullError(
        f"the step's tool {tool!r} could not write{where}: the disk is full ({full.strerror}); "
        f"nothing of this step was saved. {FULL_HINT}"
    ) from exc


def failure(
    cls: FailureClass, message: str, *, tool: str, error_type: str = "", hint: str | None = None
) -> StepFailure:
    return StepFailure(
        failure_class=cls,
        message=message,
        error_type=error_type,
        hint=hint,
        signature=signature(cls, tool, message),
        at=utcnow(),
    )


_NOISE = [
    (re.compile(r"[0-9a-f]{8,}", re.I), "<hex>"),  # keys, ids, hashes
    (re.compile(r"\d+(\.\d+)?"), "<n>"),  # counts, ports, durations, timestamps
    (re.compile(r"\s+"), " "),
]


def signature(cls: FailureClass, tool: str, message: str) -> str:
    """Class + tool + the message with numbers and ids normalised away: two failures with
    the same signature are the same failure, whatever the timestamp in the text."""
    text = message.strip().lower()
    for pattern, repl in _NOISE:
        text = pattern.sub(repl, text)
    return f"{cls.value}|{tool}|{text[:300]}"


def converge(
    new: StepFailure, record: StepRecord, policy: RetryPolicy, max_replans: int
) -> tuple[StepFailure, int]:
    """Decide whether a failure is non-convergent given the step's previous record; returns
    the failure (re-classed if so, the original class kept in the message) and the streak
    of same-signature failures it ends."""
    previous = record.failure
    streak = record.streak + 1 if previous and previous.signature == new.signature else 1
    attempts = record.attempts - record.attempt_floor
    why = None
    if streak >= policy.same_failure_limit:
        why = f"the same failure {streak} times in a row"
    elif new.failure_class is FailureClass.TRANSIENT and attempts >= policy.max_attempts:
        why = f"still failing after {attempts} attempts (retry policy: {policy.max_attempts})"
    elif (
        new.failure_class in (FailureClass.DETERMINISTIC, FailureClass.VALIDATION)
        and record.replans >= max_replans
    ):
        why = (
            f"still failing after {record.replans} replans (budget: {max_replans})"
            if max_replans
            else "replanning is off (max_replans 0)"
        )
    if why is not None:
        new = new.model_copy(
            update={
                "failure_class": FailureClass.NON_CONVERGENT,
                "message": f"{why}: {new.message} (was {new.failure_class.value})",
            }
        )
    return new.model_copy(update={"attempt": record.attempts}), streak


def shelved(record: StepRecord) -> list[StepFailure]:
    """The step's failure history with its last failure added (kept when it runs again)."""
    if record.failure is None:
        return list(record.history)
    return [*record.history, record.failure][-HISTORY_KEPT:]


def settle(
    record: StepRecord, before: StepRecord, policy: RetryPolicy, max_replans: int, tool: str
) -> StepRecord:
    """A step's record after an attempt, with its failure judged for convergence against
    ``before`` (the record as the attempt found it, its attempt counted): a failure may turn
    non-convergent; a success resets the streak."""
    if record.status is not StepStatus.FAILED or record.failure is None:
        # Records are frozen: one whose streak is already 0 is the answer as it is.
        return record if record.streak == 0 else record.model_copy(update={"streak": 0})
    found = record.failure
    if not found.signature:  # verifier findings
        found = failure(found.failure_class, found.message, tool=tool, error_type=found.error_type)
    judged, streak = converge(found, before, policy, max_replans)
    return record.model_copy(update={"failure": judged, "streak": streak})
