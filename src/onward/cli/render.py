"""Printing for people and for machines: the two consoles, a run's view, JSON dumps.

Streams: stdout carries a command's result (the view, a table, JSON), stderr its progress,
hints and errors; every write is flushed as it is made, so the two stay in order when both
go to one pipe or file. Tables fit the terminal: a table whose columns cannot all get room
becomes one card per row (see :func:`print_rows`); ids are never wrapped or cut, other
cells wrap at spaces or fold, and nothing is cut to an ellipsis.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from onward.client import RunView
    from onward.observe.plain import PlainView

out = Console()
err = Console(stderr=True)  # progress, hints and errors: stdout stays the command's result

COMFORT = 12
"""A wrapping column narrower than this (or its longest word) makes a table a card list."""
GAP = 3
"""Columns of a table without edges are apart by a pad, the rule and a pad."""


def say(text: str, end: str = "\n") -> None:
    """Plain result text on stdout, flushed (print() alone is buffered in a pipe, so a
    later stderr line would overtake it)."""
    sys.stdout.write(text + end)
    sys.stdout.flush()


def print_plain(text: str, console: Console = out) -> None:
    """``text`` on ``console`` as it is: no rich markup read, no highlighting (ids, paths
    and model output may hold brackets)."""
    console.print(text, highlight=False, markup=False)


def clip(text: str, limit: int) -> str:
    """``text`` up to ``limit`` characters, saying how much more there is (never a bare
    ellipsis that looks like a cut cell)."""
    return text if len(text) <= limit else f"{text[:limit]} …(+{len(text) - limit} chars)"


@dataclass(frozen=True, slots=True)
class Col:
    """A column of :func:`print_rows`."""

    header: str
    whole: bool = False
    """An id people copy: never wrapped, folded or cut."""
    head: bool = True
    """On a card's first line; else on a line of its own below it."""
    label: bool = False
    """A head cell shows its header before it on a card (``step a``); a line below
    always does, unless the column's header is empty."""
    justify: JustifyMethod = "left"


def _widths(header: str, cells: Sequence[str], whole: bool) -> tuple[int, int]:
    """(narrowest without cutting a word, natural one-line width) of a column."""
    lines = [header, *(line for c in cells for line in c.splitlines() or [""])]
    natural = max(cell_len(x) for x in lines)
    if whole:
        return natural, natural
    words = [w for x in lines for w in x.split()] or [""]
    return max(cell_len(w) for w in words), natural


def fits(cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int) -> bool:
    """A table of ``rows`` fits ``width``: every column gets its longest word (an id its
    whole text) and a wrapping column at least COMFORT characters where it has them."""
    need = GAP * (len(cols) - 1)
    for i, col in enumerate(cols):
        narrow, natural = _widths(col.header, [r[i] for r in rows], col.whole)
        need += max(narrow, min(natural, COMFORT))
    return need <= width


def print_rows(
    cols: Sequence[Col], rows: Sequence[Sequence[str]], console: Console | None = None
) -> None:
    """Rows as a table when it fits the console, else as cards: the head cells on one
    line, each other cell on a line below. Ids stay whole either way."""
    console = console or out
    if fits(cols, rows, console.width):
        table = Table(show_edge=False, pad_edge=False)
        for i, col in enumerate(cols):
            whole = max((cell_len(r[i]) for r in rows), default=0) if col.whole else None
            table.add_column(
                col.header, no_wrap=col.whole, overflow="fold", justify=col.justify, min_width=whole
            )
        for r in rows:
            table.add_row(*(Text(c) for c in r))
        console.print(table)
        return
    for r in rows:
        head = Text()
        for col, cell in zip(cols, r, strict=True):
            if not col.head or not cell:
                continue
            first = not head
            if not first:
                head.append("  ")
            if col.label:
                head.append(f"{col.header} ", style="dim")
            head.append(cell, style="bold" if first else "")
        console.print(head, overflow="fold")
        for col, cell in zip(cols, r, strict=True):
            if col.head or not cell:
                continue
            line = Text("  ")
            if col.header:
                line.append(f"{col.header}: ", style="dim")
            line.append(cell)
            console.print(line, overflow="fold")


def dump(data: Any) -> None:
    say(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def view_json(view: RunView) -> str:
    return view.model_dump_json(indent=2)


def print_view(view: RunView | PlainView) -> None:
    """A run's view (or the plain one ``onward status`` reads without pydantic:
    onward.observe.plain); statuses are compared by value, so neither needs the enums."""
    colour = {"done": "green", "failed": "red"}.get(view.status.value, "yellow")
    shown = "stalled" if view.stalled else view.status.value
    skipped = sum(s.status.value == "skipped" for s in view.steps)
    if skipped:  # done, but not all of it: say so where the eye lands first
        shown += f", {skipped} step{'s' if skipped > 1 else ''} skipped"
        colour = "yellow" if colour == "green" else colour
    # Text, not markup: the objective and messages are user text ([brackets] included).
    out.print(
        Text.assemble(
            "thread ", (view.thread_id, "bold"), "  status ", (shown, colour), "  ", view.objective
        )
    )
    if view.driver:
        out.print(f"driver {view.driver}, last heartbeat {view.heartbeat_at}", highlight=False)
    if view.steps:
        print_rows(
            (
                Col("step", whole=True),
                Col("tool"),
                Col("status"),
                Col("attempts", label=True),
                Col("detail", head=False),
            ),
            [
                (
                    s.id,
                    s.tool,
                    s.status.value,
                    str(s.attempts),
                    clip(s.error or s.note or (s.output.summary if s.output else ""), 300),
                )
                for s in view.steps
            ],
        )
        count = Counter(s.status.value for s in view.steps)
        remaining = count["pending"] + count["running"] + count["produced"]
        out.print(
            f"done {count['done']} · failed {count['failed']} · skipped "
            f"{count['skipped']} · remaining {remaining}",
            highlight=False,
        )
    if view.artifacts:  # what the run made (the report's last lines; the table has the rest)
        out.print(
            Text.assemble(("artifacts: ", "dim"), ", ".join(sorted(view.artifacts))),
            overflow="fold",
        )
    if view.paused_before:
        print_plain(
            f"paused before {', '.join(view.paused_before)}: `onward resume {view.thread_id}` "
            "goes on"
        )
    if view.failure:
        out.print(Text.assemble(("reason: ", "red"), view.failure.message))
    if view.usage.calls:
        u = view.usage
        out.print(
            f"model: {u.calls} calls, {u.input_tokens} in + {u.output_tokens} out tokens, "
            f"cost {u.cost:.4f}",
            highlight=False,
        )
    if view.resume_at:
        out.print(
            f"suspended until {view.resume_at:%Y-%m-%d %H:%M:%S} (backoff or an open breaker); "
            f"`onward resume {view.thread_id}` waits for it",
            highlight=False,
        )
    if view.status == "suspended" and not view.resume_at and view.report:
        out.print(f"{view.report} `onward resume {view.thread_id}` goes on.", highlight=False)
    for p in view.pending:
        what = p.reason or f"approve {p.tool}?"
        out.print(Text.assemble(("waiting: ", "yellow"), f"{p.step_id or 'plan'}: {what}"))
        print_plain(
            f"  args {clip(json.dumps(p.args, ensure_ascii=False), 300)}"
            + (f"  key {p.key}" if p.key else "")
            + f"\n  answer: onward approve|reject|respond {view.thread_id} --step "
            f"{p.step_id or 'plan'}  (deadline {p.expire_at:%Y-%m-%d %H:%M} → {p.on_expiry})"
        )
