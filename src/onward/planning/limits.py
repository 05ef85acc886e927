"""What a plan may hold, checked when it is read and validated, before anything is stored.

| limit | value | why |
| --- | --- | --- |
| :data:`MAX_PLAN_BYTES` | 16 MiB | a plan file's size |
| :data:`MAX_DEPTH` | 100 levels | nesting (the top mapping is level 1), as in a request |
| :data:`MAX_STEPS` | 20,000 | steps in one plan |
| :data:`MAX_VALUES` | 1,000,000 | values in a plan; a YAML alias counts at each use |

The run's policy adds a tighter, adjustable limit: ``max_plan_steps`` (300 by default;
:func:`plan_size_problem`), whoever makes the plan (a file, a model, a ``for_each``
expansion, a revision).

Past the fixed limits, serializers and the YAML loader fail deep inside (recursion, "maximum
serialization depth"), after parts of a run may have been stored; so a plan is refused
with a :class:`~onward.errors.PlanProblem` first. A plan's values must also be what the
store and the checkpoints hold: text without NUL characters or lone surrogates (a
surrogate *pair*, which ``json.dump`` writes for an emoji as ``\\ud83c\\udf89`` and YAML
reads as two halves, is decoded to its character), integers within 64 bits, finite floats,
mapping keys that are text. A YAML date or time becomes its ISO text; other YAML types
(``!!binary``, ``!!set``) are refused.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import Any

from onward.errors import PlanProblem

MAX_PLAN_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 100
MAX_STEPS = 20_000
MAX_VALUES = 1_000_000
INT_RANGE = (-(2**63), 2**63 - 1)
_LOW, _HIGH = INT_RANGE
MAX_PROBLEMS = 20
"""Value problems reported for one plan (the rest are counted): one mistake repeated in a
large generated plan should not print a thousand lines."""


def clean_value(
    value: Any, where: str = "", *, depth: int = 1, problems: list[PlanProblem] | None = None
) -> tuple[Any, list[PlanProblem]]:
    """``value`` with its surrogate pairs decoded and YAML dates as text, and the problems
    that keep it from being stored (nesting, counts, text, numbers); ``depth``: the level
    ``value`` is at in its plan. Problems are appended to ``problems`` when given."""
    cleaner = Cleaner()
    out = cleaner.clean(value, where, depth)
    found = problems if problems is not None else []
    found += cleaner.done()
    return out, found


def _join(where: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


class Cleaner:
    """One plan's values, cleaned part by part (:meth:`clean`) under one count of values
    and of problems; :meth:`done` gives the problems."""

    def __init__(self) -> None:
        self.problems: list[PlanProblem] = []
        self.count = 0
        self.hidden = 0
        self._over = False

    def clean(self, value: Any, where: str = "", depth: int = 1) -> Any:
        out = self.value(value, where, depth)
        if self.count <= MAX_VALUES:
            return out
        if not self._over:
            self._over = True
            self.add(
                where,
                f"the plan holds more than {MAX_VALUES:,} values (a YAML alias counts at "
                "each use); split it into smaller plans",
            )
        return None

    def done(self) -> list[PlanProblem]:
        if self.hidden:
            self.problems.append(PlanProblem("(plan)", f"{self.hidden} more problem(s) like these"))
            self.hidden = 0
        return self.problems

    def add(self, where: str, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(PlanProblem(where or "(top)", message))
        else:
            self.hidden += 1

    def value(self, v: Any, where: str, depth: int) -> Any:
        self.count += 1
        if self.count > MAX_VALUES:  # stop descending; clean_value reports it once
            return None
        if v is None or isinstance(v, bool):
            return v
        if isinstance(v, str):
            return self.text(v, where)
        if isinstance(v, int):
            if not INT_RANGE[0] <= v <= INT_RANGE[1]:
                self.add(where, "integer out of range: plans hold 64-bit integers; quote it")
            return v
        if isinstance(v, float):
            if not math.isfinite(v):
                self.add(where, f"{v} is not a number a plan can hold; write a finite number")
            return v
        if isinstance(v, (dict, list, tuple)):  # a tuple of types: no union built per call
            if depth > MAX_DEPTH:
                self.add(
                    _clip(where),
                    f"nested more than {MAX_DEPTH} levels deep (the limit of a plan); flatten it",
                )
                return None
            # A plain value (None, a bool, an int within 64 bits, ASCII text without NUL:
            # kept as it is, never a problem) is counted and kept right here: no call per
            # value, and no location text, which only a problem needs. Exact types only: a
            # subclass (a StrEnum) takes value(), as before.
            if not isinstance(v, dict):  # a tuple (from Python) is stored as a list
                items: list[Any] = []
                for i, x in enumerate(v):
                    if _plain(x):
                        self.count += 1
                        items.append(x if self.count <= MAX_VALUES else None)
                    else:
                        items.append(self.value(x, _join(where, i), depth + 1))
                return items
            out: dict[str, Any] = {}
            for k, x in v.items():
                if not isinstance(k, str):
                    self.add(
                        _join(where, str(k)),
                        f"a key must be text, not {type(k).__name__} {k!r}; quote it",
                    )
                    continue
                key = k if _plain(k) else self.text(k, _join(where, k))
                if _plain(x):
                    self.count += 1
                    out[key] = x if self.count <= MAX_VALUES else None
                else:
                    out[key] = self.value(x, _join(where, key), depth + 1)
            return out
        if isinstance(v, dt.date | dt.time):  # YAML reads 2024-01-31 as a date
            return v.isoformat()
        if isinstance(v, bytes | bytearray | set | frozenset):  # YAML's !!binary, !!set
            self.add(
                where,
                f"a {type(v).__name__} is not a plan value; write text, a number, true/false, "
                "null, a list or a mapping",
            )
            return None
        return v  # another Python object in a Plan built in Python: pydantic serializes it

    def text(self, s: str, where: str) -> str:
        if "\x00" in s:
            self.add(where, f"text {_show(s)} holds a NUL character (\\u0000); remove it")
        try:
            s.encode("utf-8")
            return s
        except UnicodeEncodeError:
            pass
        try:  # surrogate pairs (from \uXXXX\uXXXX escapes) → their characters
            return s.encode("utf-16", "surrogatepass").decode("utf-16")
        except UnicodeDecodeError:
            if any("\udc80" <= c <= "\udcff" for c in s):  # undecodable bytes (surrogateescape)
                self.add(
                    where,
                    f"text {_show(s)} holds bytes that are not UTF-8 (a name or argument in "
                    "another encoding); rename it, or pass it as UTF-8",
                )
                return s
            self.add(
                where,
                f"text {_show(s)} holds a lone surrogate (a \\uD800-\\uDFFF escape without its "
                "pair): it is not a character. Write the character itself, or its full pair",
            )
            return s


def _plain(x: Any) -> bool:
    """None, a bool, an int within 64 bits, or ASCII text without NUL: a value that is
    never a problem (exact types: a subclass such as a StrEnum takes the full check)."""
    t = type(x)
    return (
        (t is str and x.isascii() and "\x00" not in x)
        or x is None
        or t is bool
        or (t is int and _LOW <= x <= _HIGH)
    )


def _show(s: str) -> str:
    return ascii(s[:40] + ("..." if len(s) > 40 else ""))


def _clip(where: str, keep: int = 60) -> str:
    return where if len(where) <= keep else where[:keep] + "…"


def step_count_problem(steps: Sequence[Any]) -> PlanProblem | None:
    if len(steps) > MAX_STEPS:
        return PlanProblem(
            "steps",
            f"{len(steps):,} steps; a plan holds at most {MAX_STEPS:,}: split the work into "
            "several runs",
        )
    return None


RAISE_HINT = (
    "raise the limit with --max-plan-steps N (max_plan_steps in the policy file or in "
    "RunPolicy), or split the work into several runs"
)
"""How a person raises the plan-size limit (declared plans)."""
MODEL_HINT = "use for_each (one line for many files) or fewer steps"
"""What a model is told to do about a draft over the limit."""


def plan_size_problem(count: int, limit: int, hint: str = RAISE_HINT) -> PlanProblem | None:
    """The problem of a plan of ``count`` steps under a run's ``max_plan_steps``, if any."""
    if count <= limit:
        return None
    return PlanProblem(
        "steps",
        f"{count:,} steps; this run allows at most {limit:,} (max_plan_steps): {hint}",
    )
