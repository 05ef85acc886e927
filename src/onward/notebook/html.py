"""HTML for notebooks: what a run, a step, a question, a timeline and a summary show in
Jupyter (their ``_repr_html_``), and in the docs pages made from the executed notebooks.

Everything a run holds is data from tools, models and users, so every value goes through
:func:`html.escape` (attribute values too); nothing here emits a script, an event
handler or a link. Plain tables with inline styles: no CSS or JavaScript to load, so it
looks the same offline, in a trusted or an untrusted notebook and on the docs site.
Long runs stay cheap to show: at most :data:`MAX_ROWS` rows are built (a 10,000-step
run decodes only the steps it shows).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import cache
from html import escape
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onward.observe.timeline import Summary, TimelineEvent
    from onward.observe.view import RunView, StepView
    from onward.people.inbox import PendingDecision

MAX_ROWS = 50
"""Rows of steps or events shown; the rest is counted ("… and 120 more")."""
MAX_TEXT = 300
"""Characters of one value shown (a summary, an error, a detail); the rest is cut."""

_COLOURS = {
    "done": "#1a7f37",
    "failed": "#cf222e",
    "cancelled": "#6e7781",
    "skipped": "#6e7781",
    "pending": "#6e7781",
    "waiting_for_human": "#bf8700",
    "suspended": "#bf8700",
    "running": "#0969da",
    "produced": "#0969da",
    "planning": "#0969da",
}
MAX_REPORT = 4000
"""Characters of a run's final report rendered (cut at a line; the rest is counted)."""
_TABLE = 'style="border-collapse:collapse;margin:0.3em 0"'
_BOX = "border:1px solid #d0d7de;padding:2px 6px"
_CELL = f'style="{_BOX};text-align:left"'


def text(value: Any, limit: int = MAX_TEXT) -> str:
    """A value as escaped text, cut to ``limit`` characters."""
    s = value if isinstance(value, str) else str(value)
    return escape(s if len(s) <= limit else s[: limit - 1] + "…")


def attr(value: Any) -> str:
    """An attribute value (quoted by the caller with double quotes)."""
    return escape(str(value), quote=True)


def badge(status: str) -> str:
    colour = _COLOURS.get(status, "#6e7781")
    return (
        f'<span class="onward-status" data-status="{attr(status)}" style="color:#fff;'
        f'background:{colour};border-radius:4px;padding:0 5px">{text(status)}</span>'
    )


def table(head: Sequence[str], rows: Iterable[tuple[dict[str, str], Sequence[str]]]) -> str:
    """A table; each row is (its data attributes, its cells as HTML already escaped)."""
    th = "".join(f"<th {_CELL}>{text(h)}</th>" for h in head)
    thead = f"<thead><tr>{th}</tr></thead>" if head else ""  # none for a list of fields
    body = []
    for data, cells in rows:
        attrs = "".join(f' data-{k}="{attr(v)}"' for k, v in data.items())
        tds = "".join(f"<td {_CELL}>{c}</td>" for c in cells)
        body.append(f"<tr{attrs}>{tds}</tr>")
    return f"<table {_TABLE}>{thead}<tbody>{''.join(body)}</tbody></table>"


def more(shown: int, total: int) -> str:
    return f"<p><em>… and {total - shown} more</em></p>" if total > shown else ""


def when(at: datetime | None) -> str:
    return text(at.strftime("%Y-%m-%d %H:%M:%S")) if at is not None else ""


def pretty(value: Any) -> str:
    """JSON of a value (args, details), escaped, in a ``<pre>``."""
    dumped = json.dumps(value, indent=1, ensure_ascii=False, default=str, sort_keys=True)
    return f'<pre style="margin:0.2em 0">{text(dumped, 2000)}</pre>'


# -- one step ------------------------------------------------------------------


def step_result(step: StepView) -> str:
    """What a step came to, in one cell: its output, its error, or why it waits."""
    if step.error:
        return f"<strong>{text(step.failure_class or 'failed')}</strong>: {text(step.error)}"
    if step.output is not None:
        return text(step.output.summary)
    if step.not_before is not None:
        return f"retries after {when(step.not_before)}"
    return text(step.note or "")


def step_html(step: StepView) -> str:
    rows: list[tuple[str, str]] = [
        ("tool", f"<code>{text(step.tool)}</code>"),
        ("status", badge(step.status.value)),
        ("attempts", text(step.attempts)),
    ]
    if step.output is not None:
        rows.append(("output", f"{text(step.output.summary)} <code>{text(step.output.uri)}</code>"))
    for i, failure in enumerate(step.failures, 1):
        rows.append(
            (
                f"failure {i}",
                f"<strong>{text(failure.failure_class)}</strong> "
                f"(attempt {text(failure.attempt)}): {text(failure.message)}",
            )
        )
    if step.findings:
        rows.append(("findings", "<br>".join(text(f) for f in step.findings)))
    if step.note:
        rows.append(("note", text(step.note)))
    cells = ((({"field": k}), (text(k), v)) for k, v in rows)
    return (
        f'<div class="onward-step" data-step="{attr(step.id)}">'
        f"<p><strong>step</strong> <code>{text(step.id)}</code></p>"
        f"{table((), cells)}</div>"
    )


# -- a question ----------------------------------------------------------------


def question_html(q: PendingDecision) -> str:
    step = f" for step <code>{text(q.step_id)}</code>" if q.step_id else ""
    parts = [
        f'<div class="onward-question" data-interrupt-id="{attr(q.interrupt_id)}" '
        f'data-kind="{attr(q.kind.value)}" style="border-left:4px solid #bf8700;'
        'padding-left:8px;margin:0.4em 0">',
        f"<p><strong>{text(q.kind.value)}</strong>{step}: <code>{text(q.tool)}</code></p>",
        f'<p class="onward-description">{text(q.description, 1000)}</p>',
    ]
    if q.reason:
        parts.append(f'<p class="onward-reason">why: {text(q.reason, 1000)}</p>')
    parts.append(pretty(q.args))
    answers = " · ".join(f"<code>{text(a)}</code>" for a in q.allowed)
    parts.append(
        f"<p>answers: {answers}; if nobody answers by {when(q.expire_at)}: "
        f"{text(q.on_expiry.value)}</p>"
    )
    if q.errors:
        items = "".join(f"<li>{text(e)}</li>" for e in q.errors)
        parts.append(
            f'<p>the last answer could not apply:</p><ul class="onward-errors">{items}</ul>'
        )
    parts.append("</div>")
    return "".join(parts)


def questions_html(questions: Sequence[PendingDecision]) -> str:
    """Questions of any runs (an inbox), each under its run's thread id and goal."""
    if not questions:
        return '<div class="onward-questions"><p>no question is waiting</p></div>'
    parts = ['<div class="onward-questions">']
    for q in questions[:MAX_ROWS]:
        parts.append(
            f'<p class="onward-question-run">run <code>{text(q.thread_id)}</code>: '
            f"{text(q.objective, 200)}</p>{question_html(q)}"
        )
    parts.append(more(min(len(questions), MAX_ROWS), len(questions)))
    parts.append("</div>")
    return "".join(parts)


# -- a run -----------------------------------------------------------------------


def run_html(view: RunView) -> str:
    steps = view.steps
    shown = steps[:MAX_ROWS]
    counts = view.step_counts()
    tally = ", ".join(f"{n} {s}" for s, n in counts.items())
    parts = [
        f'<div class="onward-run" data-thread-id="{attr(view.thread_id)}" '
        f'data-status="{attr(view.status.value)}">',
        f"<p><strong>run</strong> <code>{text(view.thread_id)}</code> "
        f"{badge(view.status.value)}</p>",
        f'<p class="onward-objective">{text(view.objective, 1000)}</p>',
    ]
    if view.plan_version is not None:
        parts.append(
            f"<p>plan v{text(view.plan_version)} ({text(view.plan_source)}): "
            f"{len(steps)} steps{': ' + text(tally) if tally else ''}</p>"
        )
    if view.failure is not None:
        parts.append(
            f'<p class="onward-failure"><strong>failed</strong>: {text(view.failure.message)}</p>'
        )
    if view.resume_at is not None:
        parts.append(f"<p>goes on at {when(view.resume_at)}</p>")
    if view.stalled:
        parts.append(
            f'<p class="onward-stalled"><strong>stalled</strong>: its driver '
            f"<code>{text(view.driver)}</code> sent no heartbeat since "
            f"{when(view.heartbeat_at)}</p>"
        )
    if view.paused_before:
        nodes = ", ".join(f"<code>{text(n)}</code>" for n in view.paused_before)
        parts.append(f"<p>paused before {nodes}; a resume goes on</p>")
    if shown:
        rows = (
            (
                {"step": s.id, "status": s.status.value},
                (
                    f"<code>{text(s.id)}</code>",
                    f"<code>{text(s.tool)}</code>",
                    badge(s.status.value),
                    text(s.attempts),
                    step_result(s),
                ),
            )
            for s in shown
        )
        parts.append(table(("step", "tool", "status", "attempts", "result"), rows))
        parts.append(more(len(shown), len(steps)))
    if view.pending:
        parts.append(f"<p><strong>{len(view.pending)} question(s) waiting</strong></p>")
        parts.extend(question_html(q) for q in view.pending)
    if view.usage.calls:
        u = view.usage
        parts.append(
            f"<p>model: {u.calls} calls, {u.input_tokens} + {u.output_tokens} tokens, "
            f"${u.cost:.4f}</p>"
        )
    if view.report:
        parts.append(f'<div class="onward-report">{markdown(view.report)}</div>')
    parts.append("</div>")
    return "".join(parts)


@cache
def _markdown_it() -> Any:
    from markdown_it import MarkdownIt

    # No raw HTML (escaped as text), no links or images (shown as their source text).
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    return md.disable(["link", "image", "autolink"])


def markdown(source: str, limit: int = MAX_REPORT) -> str:
    """A run's final report (Markdown: bold, code, tables) as HTML, rendered by
    markdown-it (rich's own dependency). HTML in it is escaped and links and images stay
    text, so it emits no script, handler or link either; cut at a line past ``limit``."""
    if len(source) > limit:
        cut = source.rfind("\n", 0, limit) + 1 or limit
        source = f"{source[:cut]}\n*… and {len(source) - cut} more characters*\n"
    rendered: str = _markdown_it().render(source)
    rendered = rendered.replace("<table>", f"<table {_TABLE}>")
    for cell in ("th", "td"):
        rendered = rendered.replace(f'<{cell} style="', f'<{cell} style="{_BOX};')
        rendered = rendered.replace(f"<{cell}>", f"<{cell} {_CELL}>")
    return rendered


# -- looking back -----------------------------------------------------------------


def timeline_html(events: Sequence[TimelineEvent]) -> str:
    shown = events[:MAX_ROWS] if len(events) > MAX_ROWS else events
    rows = (
        (
            {"kind": e.kind},
            (
                when(e.at),
                text(e.kind),
                f"<code>{text(e.step_id)}</code>" if e.step_id else "",
                text(e.attempt) if e.attempt is not None else "",
                text(_detail(e.detail), 200),
            ),
        )
        for e in shown
    )
    head = ("at", "event", "step", "attempt", "detail")
    return f'<div class="onward-timeline">{table(head, rows)}{more(len(shown), len(events))}</div>'


def _detail(detail: dict[str, Any]) -> str:
    rest = {k: v for k, v in detail.items() if k not in ("step_id", "attempt")}
    return json.dumps(rest, ensure_ascii=False, default=str, sort_keys=True) if rest else ""


def summary_html(s: Summary) -> str:
    rows: list[tuple[str, str]] = [
        ("status", badge(s.status)),
        ("steps done", f"{s.steps_done} of {s.steps}"),
        (
            "time",
            f"{s.total_seconds:.1f} s ({s.busy_seconds:.1f} busy, {s.waiting_seconds:.1f} waiting)",
        ),
        ("retries", text(", ".join(f"{k}: {v}" for k, v in s.retries.items()) or "none")),
        (
            "failures",
            text(", ".join(f"{k}: {v}" for k, v in s.failures_by_class.items()) or "none"),
        ),
        ("people asked", text(len(s.interventions))),
        (
            "model",
            f"{s.model_calls} calls, {s.input_tokens} + {s.output_tokens} tokens, ${s.cost:.4f}",
        ),
    ]
    cells = (({"field": k}, (text(k), v)) for k, v in rows)
    return (
        f'<div class="onward-summary" data-thread-id="{attr(s.thread_id)}">'
        f"<p><strong>summary</strong> of <code>{text(s.thread_id)}</code></p>"
        f"{table((), cells)}</div>"
    )
