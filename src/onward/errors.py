"""onward's one error tree.

Failures are things that went wrong and that the user must act on; control
signals are not errors at all but tell a caller how a run stopped. Every
message says what is wrong *and* what to do about it::

    class                           CLI exit  HTTP  meaning
    OnwardError                          2    500  (the defaults a class inherits)
    ├── UsageError                       2    422  bad input from the user
    │   ├── ForbiddenError               2    403  a client may not change this; names the way
    │   ├── RequestLimitError            2 413/429 over a limit: body size, or runs in flight
    │   ├── PlanValidationError          2    422  a plan with one or more problems, each located
    │   ├── PlanningError                2    422  no plan could be made for a goal
    │   │   ├── NoTemplateError          2    422  no built-in template matches (a model may plan)
    │   │   └── ModelPlanningError       2    422  the model's plans failed; carries their usage
    │   ├── ModelBlockedError            2    422  a real provider while model requests are blocked
    │   ├── ScriptExhaustedError         2    422  a ScriptedChatModel called past its script
    │   ├── UnknownThreadError           2    404  a thread the store does not have
    │   ├── ToolLoadError                2    422  a --tools module could not be imported
    │   ├── AnswerError                  2    422  an answer to a waiting question cannot apply
    │   └── TokenError                   2    403  a resume token missing, wrong, expired, not yours
    ├── StoreError                       2    503  the database cannot be used; nothing written
    │   ├── StoreCorruptError            2    503  the file is not an onward/SQLite database
    │   ├── StoreLockedError             4    503  another process holds the database lock
    │   │                                          (Retry-After: 1; waiting helps, like exit 4)
    │   ├── DiskFullError                2    503  the disk is full (the store's or a tool's):
    │   │                                          the run is suspended; free space, resume
    │   ├── DatabaseUnavailable          2    503  Postgres unreachable now; waited out, retried
    │   │   └── DatabaseGone             2    503  unreachable past ONWARD_PG_OUTAGE: gave up
    │   └── EncryptionKeyError           2    503  ONWARD_AES_KEY missing, malformed or not the key
    ├── ArtifactError                    2    500  an artifact body missing or not its sha256
    ├── InconsistentRunError             3    500  a done step's artifact is gone and cannot be
    │                                              re-made safely: a human restores it or forks
    ├── RunBusyError                     4    409  another live driver holds the run's lease
    ├── LeaseLostError                   4    500  this driver's lease was taken over mid-run
    ├── LoopGuardError                   3    500  more supersteps than the run's plan can need
    └── InternalError                   70    500  a bug in onward (sysexits' EX_SOFTWARE)
        └── IllegalTransitionError      70    500  a node tried a step transition the table forbids

The CLI and ``onward serve`` take codes only from these attributes (``exit_code``,
``http_status``, ``retry_after``); ``tests/unit/test_public_api.py`` pins the table.

    ToolError                       raised by tools (failures of one step, not of onward)
    ├── TransientToolError          worth retrying later (timeouts, 5xx, ...)
    └── DeterministicToolError      retrying with the same arguments cannot help

    OnwardWarning                   (a UserWarning) worth knowing, not stopping for
    └── UnpricedModelWarning        a cost budget with a model the price table lacks

    DrainRequested                  control signal: a worker told to stop (SIGTERM) starts no
                                    more nodes; the run's last superstep is saved
    └── AnswerRecorded              an answer inside a step was recorded and the drive was
                                    told to stop after it (approve --no-continue)
    OutcomeUnknown                  control signal, not a failure: an interrupted effect
                                    may or may not have happened; a human must say
    JudgeUnavailable                control signal, not a finding: the judge gave no verdict;
                                    verify and finalize ask a person or pass, by policy

Tool errors never escape the execute node: they become a classified
``StepFailure`` stored on the step.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

    from onward.model.state import Usage


class OnwardError(Exception):
    """Base class of every error onward raises on purpose."""

    exit_code: int = 2
    """The CLI's exit code for it (see the conventions: 2 usage, 3 stopped for a human,
    4 busy)."""
    http_status: int = 500
    """The HTTP status ``onward serve`` answers it with."""
    retry_after: int | None = None
    """Seconds after which trying again may succeed (the ``Retry-After`` header); None when
    waiting does not help."""


class UsageError(OnwardError):
    """The user's input is wrong; fix it and run the command again. Exit 2, HTTP 422."""

    http_status = 422


class ForbiddenError(UsageError):
    """A client asked to change what only the server (or the store's owner) may change.
    The message names the field and the operation to use instead; nothing was changed.
    Exit 2, HTTP 403."""

    http_status = 403


class RequestLimitError(UsageError):
    """A request over one of the server's limits (its size, or runs in flight per user).
    Nothing was stored; ``retry_after`` says when to try again, if waiting helps.
    Exit 2; HTTP 413 (too large) or 429 (too many runs), chosen by the raiser."""

    def __init__(self, message: str, *, http_status: int, retry_after: int | None = None):
        super().__init__(message)
        self.http_status = http_status
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class PlanProblem:
    """One problem in a plan, with where it is."""

    location: str
    """Where the problem is, e.g. ``steps[2] (copy-a).args.src`` or ``acceptance[0]``."""
    message: str
    """What is wrong and what to do."""

    def __str__(self) -> str:
        return f"{self.location}: {self.message}"


class PlanValidationError(UsageError):
    """A plan has problems; all of them are listed, each with its location. Exit 2, 422."""

    def __init__(self, problems: Sequence[PlanProblem], *, source: str = "plan") -> None:
        self.problems = list(problems)
        self.source = source
        lines = "\n".join(f"  - {p}" for p in self.problems)
        n = len(self.problems)
        super().__init__(
            printable(
                f"{source} is invalid ({n} problem{'s' if n != 1 else ''}); fix them and run "
                f"again:\n{lines}"
            )
        )


class PlanningError(UsageError):
    """No plan could be made for a goal. Exit 2, HTTP 422."""


class NoTemplateError(PlanningError):
    """No built-in template matches the goal (a configured model plans it instead).
    Exit 2, HTTP 422."""


class ModelPlanningError(PlanningError):
    """Planning with the model failed; ``usage`` is what the attempts cost. Exit 2, 422.
    (Importable from :mod:`onward.llm.planner` too.)"""

    def __init__(self, message: str, usage: Usage) -> None:
        super().__init__(message)
        self.usage = usage


class ModelBlockedError(UsageError):
    """A real model provider would have been called while model requests are blocked
    (``ONWARD_BLOCK_MODEL_REQUESTS``). Exit 2, HTTP 422. (Importable from
    :mod:`onward.llm.models` too.)"""


class ScriptExhaustedError(UsageError):
    """A :class:`~onward.llm.fake.ScriptedChatModel` was called more often than its script
    has answers: the test's script is too short. Exit 2, HTTP 422. (Importable from
    :mod:`onward.llm.fake` too.)"""


class UnknownThreadError(UsageError):
    """A thread id the store does not have. Exit 2, HTTP 404."""

    http_status = 404

    def __init__(self, thread_id: str, db: str) -> None:
        self.thread_id = thread_id
        super().__init__(
            f"no run with thread id {thread_id!r} in {db}; "
            "check the id with `onward list`, or pass the --db the run was started with"
        )


class ToolLoadError(UsageError):
    """A module named by --tools / ONWARD_TOOLS could not be imported. Exit 2, HTTP 422."""


class AnswerError(UsageError):
    """An answer that cannot be applied (wrong shape, decision not offered, invalid args).
    Nothing was changed: answer again. Exit 2, HTTP 422."""


class TokenError(UsageError):
    """A resume token is missing, wrong, expired or issued to someone else. Exit 2, 403."""

    http_status = 403


class StoreError(OnwardError):
    """The store cannot be opened or used. Nothing was written. Exit 2, HTTP 503."""

    http_status = 503


class DiskFullError(StoreError):
    """The disk is full (or over a quota): the database could not grow, or a step's tool or
    artifact could not be written (``ENOSPC``, ``EDQUOT``). Nothing of the failing save was
    written; the drive stops, the run is suspended, and ``onward resume`` goes on once there
    is space (store/reserve.py). Exit 2, HTTP 503."""


class DatabaseUnavailable(StoreError):
    """The Postgres server cannot be reached now: down, restarting, refusing connections
    ("too many clients"), or this connection was lost. Transient: waited out and retried
    (:meth:`~onward.store.connection.PgPool.retry`). Exit 2, HTTP 503."""


class DatabaseGone(DatabaseUnavailable):
    """The Postgres server stayed unreachable longer than ``ONWARD_PG_OUTAGE``: onward
    stopped waiting. Exit 2 (a supervisor restarts the process), HTTP 503."""


class StoreCorruptError(StoreError):
    """The file is not an onward/SQLite database. Exit 2, HTTP 503."""


class StoreLockedError(StoreError):
    """Another process holds the database lock past the busy timeout. Waiting helps: exit 4
    (busy) on the CLI, HTTP 503 with ``Retry-After: 1`` from the server."""

    exit_code = 4
    retry_after = 1


class EncryptionKeyError(StoreError):
    """The store is encrypted and ONWARD_AES_KEY is missing or another key, or the key is
    malformed. Nothing was read as garbage and nothing was written. Exit 2, HTTP 503."""


class ArtifactError(OnwardError):
    """An artifact body is missing or its content no longer matches its sha256.
    Exit 2, HTTP 500."""


class RunBusyError(OnwardError):
    """Another process is driving the run (its lease is live). Exit 4, HTTP 409."""

    exit_code = 4
    http_status = 409

    def __init__(self, thread_id: str, owner: str, heartbeat_age: float, expires_at: datetime):
        self.thread_id, self.owner, self.expires_at = thread_id, owner, expires_at
        super().__init__(
            f"run {thread_id} is being driven by {owner} (heartbeat {heartbeat_age:.0f} s ago); "
            f"wait, or use --takeover after the lease expires at {expires_at.isoformat()}"
        )


class InconsistentRunError(OnwardError):
    """Resuming would build on a missing or changed artifact that onward must not re-make.
    Exit 3 (a human restores it or forks), HTTP 500."""

    exit_code = 3


class LeaseLostError(OnwardError):
    """This driver missed its heartbeats and another took the run over; it stopped
    driving. Exit 4 (busy: another driver has it), HTTP 500 (the server's own drive broke
    off; the request did nothing wrong)."""

    exit_code = 4

    def __init__(self, thread_id: str) -> None:
        super().__init__(
            f"lost the lease on run {thread_id}: this process missed its heartbeats long enough "
            "for another to take the run over; it stopped driving. Check `onward status`"
        )


class LoopGuardError(OnwardError):
    """A drive exceeded the superstep limit derived from its plan: something loops. The
    saved state is intact; inspect it with `onward status`. Exit 3, HTTP 500."""

    exit_code = 3


class InternalError(OnwardError):
    """A bug in onward, not in the input: report it. Exit 70 (sysexits' EX_SOFTWARE, apart
    from every exit code a run or a usage error has), HTTP 500."""

    exit_code = 70


class IllegalTransitionError(InternalError):
    """A node tried a step transition the table forbids (:mod:`onward.model.state`). Exit 70,
    HTTP 500. (Importable from :mod:`onward.model.state` too.)"""


class IllegalRouteError(InternalError):
    """A node routed to an exit the route table does not declare (:mod:`onward.graph.routes`):
    the drawing and the run would disagree. Exit 70, HTTP 500."""


class ToolError(Exception):
    """Raised by a tool to fail its step with a known class.

    ``maybe_happened=False`` (the default) promises the effect did not take place (the
    service refused it, e.g. 503), so an unsafe tool may be called again without a
    reconcile probe; pass True when the call may have acted before failing (a timeout
    after sending).

    ``usage``: what a failed model call cost (:func:`onward.llm.calls.ask_json` sets it,
    possibly zero: every attempt is a call, a cut-off answer's tokens are counted); None
    for tools.
    """

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        maybe_happened: bool = False,
        usage: Usage | None = None,
    ) -> None:
        super().__init__(message)
        self.hint = hint
        self.maybe_happened = maybe_happened
        self.usage = usage


class TransientToolError(ToolError):
    """The failure may go away on its own (timeouts, rate limits, 5xx)."""


class DeterministicToolError(ToolError):
    """Retrying with the same arguments gives the same failure; ``hint`` says what to change."""


class OutcomeUnknown(Exception):
    """An unsafe effect was started by a process that died, and nothing can tell whether
    it happened. The run waits for a human (``onward resolve``) instead of guessing."""

    def __init__(self, key: str, started_at: datetime, why: str) -> None:
        self.key, self.started_at = key, started_at
        super().__init__(why)


class JudgeUnavailable(Exception):
    """The judge gave no verdict (onward.verification.judge): ``reason`` says why,
    ``usage`` what its calls cost, failed ones included. It never escapes a node."""

    def __init__(self, reason: str, usage: Usage) -> None:
        super().__init__(reason)
        self.reason, self.usage = reason, usage


class OnwardWarning(UserWarning):
    """Something the user should know that does not stop the run; the CLI prints it as a
    ``warning:`` line (``onward.cli.options.errors``)."""


class UnpricedModelWarning(OnwardWarning):
    """A run has a cost budget and its model has no price (it would cost 0, so the budget
    could never stop it): price it with ``ONWARD_PRICES`` or ``onward.llm.usage.add_price``."""


class DrainRequested(Exception):
    """Raised by a node that was about to start while its worker drains: nothing of the
    node ran, so resuming (another worker) starts it afresh."""


class AnswerRecorded(DrainRequested):
    """Raised inside a tool-calling step once a person's answer about one of its calls is
    recorded, when the drive was asked to stop after the answer (``continue_run=False``):
    the step's execution ends there and ``onward resume`` goes on from inside it."""

    CONFIG_KEY = "onward_stop_after_answer"
    """The ``configurable`` key a drive sets to ask for this stop."""


class FullRead(Exception):
    """A read without LangGraph (onward.observe.checkpoint: ``status``, ``inbox``) cannot
    give exactly what LangGraph's would; the caller reads through LangGraph instead. Never
    reaches a user."""


class FencedOut(Exception):
    """A commit's fence check failed for ``thread_id`` (its lease is another's now): the
    saver drops what it held for that thread and the drive stops with
    :class:`LeaseLostError`. Never reaches a user."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(thread_id)
        self.thread_id = thread_id


def printable(text: str) -> str:
    """``text`` with what UTF-8 cannot encode (a lone surrogate quoted from bad input)
    escaped as ``\\udXXX``, so printing or sending the message cannot fail."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def validation_message(exc: ValidationError) -> str:
    """A pydantic error as one line: ``where: what; where: what``."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(input)'}: {e['msg']}"
        for e in exc.errors(include_url=False)
    )


def refuse_unknown(given: Iterable[object], allowed: Collection[str], where: str) -> None:
    """A :class:`UsageError` naming the keys of ``given`` that are not ``allowed``: a field
    onward does not know is refused, never silently ignored."""
    unknown = sorted(str(k) for k in given if k not in allowed)
    if unknown:
        raise UsageError(
            f"{where}: unknown field(s) {', '.join(unknown)}; it may have "
            f"{', '.join(sorted(allowed))}"
        )
