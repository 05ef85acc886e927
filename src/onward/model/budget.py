"""Budgets: what a run may spend, what it has spent, and when to warn or stop.

Usage is counted from the state itself (attempts and replans on the step records,
the clock against the run's start), so a crash cannot lose or double-count it.
Crossing 50 % and 80 % of a limit warns (log and chat); reaching 100 % stops the
run with a question: raise the limit, or abort.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from onward.model.state import Budget, RunState

WARN_AT = (50, 80)


@dataclass(frozen=True, slots=True)
class Use:
    metric: str
    used: float
    limit: float

    @property
    def share(self) -> float:
        return self.used / self.limit if self.limit else 0.0

    def text(self) -> str:
        if self.metric == "run_time":
            used, limit = (timedelta(seconds=int(x)) for x in (self.used, self.limit))
            return f"run time {used} of {limit}"
        return f"{self.metric} {self.used:g} of {self.limit:g}"


def usage(state: RunState, now: datetime) -> list[Use]:
    b = state.budget
    out: list[Use] = []
    if b.max_steps is not None:
        out.append(Use("steps", state.steps.attempts_total, b.max_steps))
    if b.max_run_time is not None and state.started_at is not None:
        out.append(
            Use(
                "run_time", (now - state.started_at).total_seconds(), b.max_run_time.total_seconds()
            )
        )
    if b.max_tokens is not None:
        used = state.usage.input_tokens + state.usage.output_tokens
        out.append(Use("tokens", used, b.max_tokens))
    if b.max_cost is not None:
        out.append(Use("cost", state.usage.cost, b.max_cost))
    return out


def model_budget_spent(state: RunState) -> str | None:
    """Why no further model call may be made (tokens or cost used up), or None."""
    b, u = state.budget, state.usage
    if b.max_tokens is not None and u.input_tokens + u.output_tokens >= b.max_tokens:
        return f"the token budget is used up ({u.input_tokens + u.output_tokens} of {b.max_tokens})"
    if b.max_cost is not None and u.cost >= b.max_cost:
        return f"the cost budget is used up ({u.cost:.4f} of {b.max_cost:g})"
    return None


def exhausted(uses: list[Use]) -> list[Use]:
    return [u for u in uses if u.used >= u.limit]


def new_warnings(uses: list[Use], already: list[str]) -> list[tuple[str, Use]]:
    """(marker, use) for every threshold newly crossed; the marker (``steps:80:40``) is kept
    in state so each warning is given once per limit."""
    out = []
    for u in uses:
        for pct in WARN_AT:
            marker = f"{u.metric}:{pct}:{u.limit:g}"  # a raised limit warns afresh
            if u.share * 100 >= pct and marker not in already:
                out.append((marker, u))
    return out


def raised(budget: Budget, spent: dict[str, float], factor: float = 2.0) -> Budget:
    """The budget with every exhausted limit (metric → used) multiplied by ``factor``."""
    changes: dict[str, object] = {}
    for u in (Use(m, used, 0.0) for m, used in spent.items()):
        if u.metric == "steps" and budget.max_steps is not None:
            changes["max_steps"] = int(budget.max_steps * factor) + 1
        elif u.metric == "run_time" and budget.max_run_time is not None:
            changes["max_run_time"] = timedelta(seconds=u.used * factor)
        elif u.metric == "tokens" and budget.max_tokens is not None:
            changes["max_tokens"] = int(budget.max_tokens * factor)
        elif u.metric == "cost" and budget.max_cost is not None:
            changes["max_cost"] = budget.max_cost * factor
    return budget.model_copy(update=changes)
