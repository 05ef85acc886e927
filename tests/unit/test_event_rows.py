"""The event log's rows are built on every step, so their builders are written for speed
(observe/progress.py, observe/events.py, observe/per_thread.py). The rows they build must
be exactly those of the plain versions kept here as references."""

from __future__ import annotations

import itertools
import json
import math
import threading
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from enum import Enum
from typing import Any

import pytest

from onward.observe.events import EventLog, _json
from onward.observe.kinds import ONCE_FIELDS, EventKind
from onward.observe.per_thread import PerThread
from onward.observe.progress import _log_row
from onward.store.encryption import Cipher, open_text

_HEADER = ("step_id", "tool", "attempt", "total_steps", "message")


def _reference_row(kind: EventKind, **fields: Any) -> tuple[str, dict[str, Any], str | None]:
    """(kind, detail, dedupe key) as progress.py built them before."""
    detail: dict[str, Any] = {k: v for k in _HEADER if (v := fields.get(k)) is not None}
    if not detail.get("message", True):
        del detail["message"]
    detail.update(fields.get("detail") or ())
    once = ONCE_FIELDS.get(kind)
    key = None if once is None else ":".join([kind.value, *(str(detail.get(f)) for f in once)])
    return kind.value, detail, key


def _reference_json(detail: Any) -> str:
    return json.dumps(detail, ensure_ascii=False, default=str, separators=(",", ":"))


class _Colour(Enum):
    RED = 1


_FIELD_VALUES: dict[str, list[Any]] = {
    "step_id": [None, "s1", "s%d:x"],
    "tool": [None, "noop"],
    "attempt": [None, 0, 3],
    "total_steps": [None, 7],
    "message": [None, "", "done", 0],
    "detail": [
        None,
        {},
        {"args_digest": "0123456789abcdef", "duration": 1.2e-05},
        {"version": 2, "ask_key": "k"},
        {"step_id": "overridden", "message": ""},
        [("passed", True)],
    ],
}


def _field_sets() -> list[dict[str, Any]]:
    names = list(_FIELD_VALUES)
    sets = []
    for values in itertools.product(*_FIELD_VALUES.values()):
        sets.append({n: v for n, v in zip(names, values, strict=True) if v is not None})
    return sets


@pytest.mark.parametrize("kind", list(EventKind))
def test_a_log_row_is_the_row_the_plain_builder_made(kind: EventKind) -> None:
    for fields in _field_sets():
        before = datetime.now(UTC)
        at, *row = _log_row(kind, fields)
        assert tuple(row) == _reference_row(kind, **fields), fields
        assert type(row[0]) is str
        assert before <= at <= datetime.now(UTC)
        assert at.tzinfo is UTC


_DETAILS: list[Any] = [
    {},
    {"step_id": "s1", "tool": "noop", "attempt": 1, "args_digest": "ab", "duration": 1.2e-05},
    {"passed": True, "findings": [], "none": None, "f": False},
    {"text": 'quote " backslash \\ newline \n tab \t nul \x00 é ☃ \u2028 \ud800'},
    {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "big": 10**30, "neg": -0.0},
    {1: "int key", 2.5: "float key", False: "bool key", None: "none key"},
    {"nested": {"a": [1, {"b": (2, 3)}], "c": {}}, "tuple": ("x",)},
    {
        "when": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "dec": Decimal("1.5"),
        "colour": _Colour.RED,
        "kind": EventKind.STEP_DONE,
        "set": {1},
        "bytes": b"x",
    },
    ["a list", 1],
    "a string",
    7,
    None,
]


@pytest.mark.parametrize("detail", _DETAILS, ids=repr)
def test_a_detail_is_encoded_as_json_dumps_encodes_it(detail: Any) -> None:
    assert _json(detail) == _reference_json(detail)


def test_a_circular_detail_fails_as_json_dumps_fails() -> None:
    detail: dict[str, Any] = {"a": 1}
    detail["self"] = detail
    with pytest.raises(ValueError, match="Circular reference detected") as expected:
        _reference_json(detail)
    with pytest.raises(ValueError, match="Circular reference detected") as caught:
        _json(detail)
    assert str(caught.value) == str(expected.value)
    # a failed encode leaves nothing behind for the next one
    assert _json({"a": [1]}) == '{"a":[1]}'


def test_a_detail_whose_default_fails_fails_as_json_dumps_fails() -> None:
    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no text")

    with pytest.raises(RuntimeError, match="no text"):
        _json({"x": Unprintable()})
    assert _json({"x": 1}) == '{"x":1}'


_AT = datetime(2026, 3, 4, 5, 6, 7, 89, tzinfo=UTC)


@pytest.mark.parametrize(
    "at",
    [
        _AT,
        _AT.replace(microsecond=0),
        _AT.astimezone(timezone(timedelta(hours=2))),
        _AT.replace(tzinfo=None),
    ],
    ids=str,
)
def test_statements_hold_the_rows_as_before(at: datetime) -> None:
    rows = [
        (at, "step_done", {"step_id": "s1", "duration": 0.5}, "step_done:s1:1"),
        (at, "run_suspended", {}, None),
    ]
    (sql, values), (refs_sql, refs) = EventLog(lambda: None).statements(  # type: ignore[arg-type, return-value]
        "t1", rows, [("sha", "t1"), ("sha", "t1")]
    )
    assert sql.startswith("INSERT INTO onward_events (thread_id, at, kind, detail, dedupe)")
    assert values == [
        ("t1", at.isoformat(), "step_done", '{"step_id":"s1","duration":0.5}', "step_done:s1:1"),
        ("t1", at.isoformat(), "run_suspended", "{}", None),
    ]
    assert refs_sql.startswith("INSERT INTO onward_artifact_refs")
    assert refs == [("sha", "t1")]


def test_statements_seal_each_detail_with_the_cipher() -> None:
    cipher = Cipher(bytes(range(32)))
    rows = [(_AT, "step_done", {"step_id": "s1", "text": "é"}, "step_done:s1:1")]
    [(_, values)] = EventLog(lambda: None, cipher).statements("t1", rows)  # type: ignore[arg-type]
    [(thread, at, kind, sealed, key)] = values
    assert (thread, at, kind, key) == ("t1", _AT.isoformat(), "step_done", "step_done:s1:1")
    assert sealed != _json(rows[0][2])
    assert open_text(cipher, sealed) == '{"step_id":"s1","text":"é"}'


def test_no_rows_and_no_refs_make_no_statements() -> None:
    assert EventLog(lambda: None).statements("t1", []) == []  # type: ignore[arg-type]


def test_collecting_keeps_a_list_per_thread_and_restores_the_previous_one() -> None:
    collector: PerThread[int] = PerThread()
    assert collector.add(1) is False  # nobody collects
    with collector.collecting() as outer:
        assert collector.add(1)
        with collector.collecting() as inner:
            assert collector.add(2)
            seen: list[bool] = []
            other = threading.Thread(target=lambda: seen.append(collector.add(3)))
            other.start()
            other.join()
            assert seen == [False]  # another thread has no collector
        assert collector.add(4)
        failed: list[list[int]] = []

        def fail() -> None:
            with collector.collecting() as items:
                failed.append(items)
                collector.add(5)
                raise KeyError("the node failed")

        with pytest.raises(KeyError):
            fail()
        assert collector.add(6)
    assert collector.add(7) is False
    assert (outer, inner, failed) == ([1, 4, 6], [2], [[5]])
