"""Printing for people and for machines: the two consoles, a run's view, JSON dumps."""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from onward.client import RunView

out = Console()
err = Console(stderr=True)  # progress, hints and errors: stdout stays the command's result


def dump(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def view_json(view: RunView) -> str:
    return view.model_dump_json(indent=2)


def print_view(view: RunView) -> None:
    from onward.model.state import StepStatus

    colour = {"done": "green", "failed": "red"}.get(view.status.value, "yellow")
    shown = "stalled" if view.stalled else view.status.value
    skipped = sum(s.status is StepStatus.SKIPPED for s in view.steps)
    if skipped:  # done, but not all of it: say so where the eye lands first
        shown += f", {skipped} step{'s' if skipped > 1 else ''} skipped"
        colour = "yellow" if colour == "green" else colour
    out.print(
        f"thread [bold]{view.thread_id}[/]  status [{colour}]{shown}[/]  {view.objective}",
        highlight=False,
    )
    if view.driver:
        out.print(f"driver {view.driver}, last heartbeat {view.heartbeat_at}", highlight=False)
    if view.steps:
        table = Table(show_edge=False, pad_edge=False)
        for col in ("step", "tool", "status", "attempts", "detail"):
            table.add_column(col)
        for s in view.steps:
            detail = s.error or (s.output.summary if s.output else "")
            table.add_row(s.id, s.tool, s.status.value, str(s.attempts), detail[:160])
        out.print(table)
        count = Counter(s.status for s in view.steps)
        remaining = (
            count[StepStatus.PENDING] + count[StepStatus.RUNNING] + count[StepStatus.PRODUCED]
        )
        out.print(
            f"done {count[StepStatus.DONE]} · failed {count[StepStatus.FAILED]} · skipped "
            f"{count[StepStatus.SKIPPED]} · remaining {remaining}",
            highlight=False,
        )
    if view.paused_before:
        out.print(
            f"paused before {', '.join(view.paused_before)}: `onward resume {view.thread_id}` "
            "goes on",
            highlight=False,
            markup=False,
        )
    if view.failure:
        out.print(f"[red]reason:[/] {view.failure.message}", highlight=False)
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
    for p in view.pending:
        what = p.reason or f"approve {p.tool}?"
        out.print(Text.assemble(("waiting: ", "yellow"), f"{p.step_id or 'plan'}: {what}"))
        out.print(
            f"  args {json.dumps(p.args, ensure_ascii=False)[:300]}"
            + (f"  key {p.key}" if p.key else "")
            + f"\n  answer: onward approve|reject|respond {view.thread_id} --step "
            f"{p.step_id or 'plan'}  (deadline {p.expire_at:%Y-%m-%d %H:%M} → {p.on_expiry})",
            highlight=False,
            markup=False,
        )
