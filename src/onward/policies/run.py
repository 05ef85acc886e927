"""Per-run human-in-the-loop policy: which tools need a person, which tools may run at all,
and how long a person has to answer.

The policy lives in the run's state (it goes into checkpoints), so it is a frozen
pydantic model rather than a dataclass: it is validated when loaded from a policy
file, and a resumed run keeps the rules it started with.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from onward.errors import UsageError, validation_message
from onward.policies.durations import MAX_DURATION, parse_duration

DEFAULT_REMIND_AFTER = timedelta(hours=6)
DEFAULT_EXPIRE_AFTER = timedelta(hours=24)
DEFAULT_MAX_PLAN_STEPS = 300
"""Steps a plan may hold unless the policy says otherwise."""


class ExpiryAction(StrEnum):
    """What ``onward sweep`` does with a decision nobody made before its deadline."""

    REJECT = "reject"
    """Answer it as a rejection (the step is skipped, and so are its dependants)."""
    SUSPEND = "suspend"
    """Leave the question open but mark the run suspended (exit code 3) until answered."""


class Deadline(BaseModel):
    """When a waiting decision gets a reminder, and when it expires."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    remind_after: timedelta = DEFAULT_REMIND_AFTER
    """Time after the question was asked when a reminder is recorded (once)."""
    expire_after: timedelta = DEFAULT_EXPIRE_AFTER
    """Time after the question was asked when ``on_expiry`` is applied."""
    on_expiry: ExpiryAction = ExpiryAction.REJECT
    """The default applied at expiry."""

    @field_validator("remind_after", "expire_after")
    @classmethod
    def _in_range(cls, value: timedelta) -> timedelta:
        # Written as numbers of seconds (or ISO 8601), they skip parse_duration's checks.
        if value < timedelta(0) or value > MAX_DURATION:
            raise ValueError(
                f"{value.total_seconds():g} s is out of range: write 0 or more, at most "
                f"{MAX_DURATION.days}d"
            )
        return value

    def remind_at(self, asked_at: datetime) -> datetime:
        return asked_at + self.remind_after

    def expire_at(self, asked_at: datetime) -> datetime:
        return asked_at + self.expire_after


class RunPolicy(BaseModel):
    """A run's rules for humans in the loop. Every field has a safe default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    approve_tools: frozenset[str] = frozenset()
    """Tools that need approval in this run on top of those whose spec requires it
    (unsafe side effects, or tagged delete / overwrite / send / pay / publish)."""
    auto_approve: frozenset[str] = frozenset()
    """Tools the person starting the run approves in advance, for every step of this run
    (``--auto-approve``); they never stop for a person. Wins over the other fields."""
    approve_all: bool = False
    """Every step needs approval (dry-run style supervision)."""
    approve_plan: bool = False
    """The plan itself needs approval before any step runs (``--approve-plan``)."""
    confine_paths: bool = False
    """Tool paths must stay inside the run's work directory: absolute paths and ``..``
    that leave it are refused (runs started through ``onward serve`` always have it)."""
    escalate_failures: bool = True
    """A failure onward cannot outlive alone (no replan rule, non-convergent) waits for a
    person; False fails the run instead (unattended runs, CI: ``--no-escalate``)."""
    allow_tools: frozenset[str] | None = None
    """If set, the only tools plans may use; a plan or a revision using another is refused."""
    deadline: Deadline = Field(default_factory=Deadline)
    """Deadline of every wait in the run, unless ``tool_deadlines`` names the tool."""
    tool_deadlines: dict[str, Deadline] = Field(default_factory=dict)
    """Per-tool deadlines (they win over the tool spec's and the run's)."""
    max_plan_steps: int = Field(default=DEFAULT_MAX_PLAN_STEPS, ge=1)
    """Steps a plan may hold (declared, drafted by a model, expanded by ``for_each`` or
    grown by a revision); past it the plan is refused (``--max-plan-steps``)."""
    judge_failure: Literal["pause", "pass"] = "pause"
    """When the judge cannot run (an outage, a refused key, an unreadable verdict): ask a
    person (``pause``) or let the output pass with its review recorded as missing."""

    def deadline_for(self, tool: str | None, spec_deadline: Deadline | None = None) -> Deadline:
        if tool is not None and tool in self.tool_deadlines:
            return self.tool_deadlines[tool]
        return spec_deadline or self.deadline

    def allows(self, tool: str) -> bool:
        return self.allow_tools is None or tool in self.allow_tools


def read_mapping(path: str | Path, what: str, option: str, holds: str) -> dict[str, Any]:
    """A YAML/JSON file that must hold a mapping (a policy file, a serve configuration),
    or a :class:`UsageError` naming the file, the ``option`` it came from and what is wrong."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{what} {path} not found; check the {option} path")
    try:
        data: Any = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise UsageError(f"{what} {path} is not valid YAML/JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{what} {path} must hold {holds}")
    return data


def load_policy_file(path: str | Path) -> RunPolicy:
    """Read a policy file (YAML or JSON) such as::

    approve_tools: [write_file]
    allow_tools: [read_csv, write_file, notify]
    deadline: {remind_after: 2h, expire_after: 1d, on_expiry: suspend}
    tool_deadlines:
      http_post: {expire_after: 30m}
    """
    data = read_mapping(path, "policy file", "--policy", "a mapping of settings")
    try:
        return RunPolicy.model_validate(with_durations(data))
    except ValidationError as exc:
        raise UsageError(f"policy file {path}: {validation_message(exc)}") from None
    except UsageError as exc:
        raise UsageError(f"policy file {path}: {exc}") from None


def with_durations(data: dict[str, Any]) -> dict[str, Any]:
    """Policy settings with their duration strings (``30m``) parsed to timedeltas."""

    def fix(d: Any) -> Any:
        if not isinstance(d, dict):
            return d
        return {
            k: parse_duration(v)
            if k in ("remind_after", "expire_after") and isinstance(v, str)
            else v
            for k, v in d.items()
        }

    out = dict(data)
    if "deadline" in out:
        out["deadline"] = fix(out["deadline"])
    if isinstance(out.get("tool_deadlines"), dict):
        out["tool_deadlines"] = {k: fix(v) for k, v in out["tool_deadlines"].items()}
    return out
