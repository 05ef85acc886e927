"""Looking at runs without changing them: status, list, the event timeline and its summary,
saved states (history, show), replay, the HTML report, and the graph itself."""

from __future__ import annotations

import json
import time
from pathlib import Path
from textwrap import shorten
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from onward.cli.options import (
    DbOpt,
    JsonOpt,
    errors,
    open_store,
    open_tables,
)
from onward.cli.render import (
    Col,
    clip,
    dump,
    err,
    out,
    print_plain,
    print_rows,
    print_view,
    say,
    view_json,
)

if TYPE_CHECKING:
    from onward.observe.view import RunView

commands = typer.Typer()


@commands.command()
def status(thread_id: str, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Show a run's status and steps."""
    with errors(as_json):
        view = _read(db, thread_id, as_json)
        if view is None:
            return
    if as_json:
        say(view_json(view))
    else:
        print_view(view)


def _read(db: str | None, thread_id: str, as_json: bool) -> RunView | None:
    """The run's view (onward.observe.reading: the lightest exact read, then LangGraph);
    None once the text is printed from plain values (it needs a few fields only)."""
    from onward.observe import reading

    with open_tables(db) as tables:
        if not as_json and (shown := reading.plain_view(tables, thread_id)) is not None:
            print_view(shown)
            return None
        view = reading.view(tables, thread_id)
    if view is not None:
        return view
    with open_store(db, None, existing=True) as ow:
        return ow.get(thread_id)


@commands.command("list")
def list_runs(
    db: DbOpt = None,
    as_json: JsonOpt = False,
    limit: Annotated[int, typer.Option(min=1, help="Show at most this many runs.")] = 50,
) -> None:
    """List runs, newest first."""
    with errors(as_json), open_tables(db) as tables:
        rows = tables.list_runs(limit)
        stalled = tables.stalled_threads()
    if as_json:
        dump(
            [
                {
                    "thread_id": r.thread_id,
                    "status": r.status,
                    "stalled": r.thread_id in stalled,
                    "objective": r.objective,
                    "created_at": r.created_at.isoformat(),
                    "updated_at": r.updated_at.isoformat(),
                }
                for r in rows
            ]
        )
        return
    print_rows(
        (Col("thread id", whole=True), Col("status"), Col("created"), Col("goal", head=False)),
        [
            (
                r.thread_id,
                "stalled" if r.thread_id in stalled else r.status,
                r.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                shorten(r.objective, 120, placeholder=" …") or r.objective[:120],
            )
            for r in rows
        ],
    )


@commands.command("timeline")
def timeline_cmd(
    thread_id: str,
    step: Annotated[str | None, typer.Option("--step", help="Only this step's events.")] = None,
    kind: Annotated[
        list[str] | None, typer.Option("--kind", help="Only events of this kind (repeatable).")
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A run's events in order: steps, tool calls, checks, approvals, retries, model calls."""
    only: dict[str, Any] = {"step": step, "kinds": kind or ()}
    with errors(as_json), open_tables(db) as tables:
        if as_json:  # the models' JSON; the table needs only the rows (no pydantic)
            dump([e.model_dump(mode="json") for e in tables.timeline(thread_id, **only)])
            return
        events = tables.timeline_rows(thread_id, **only)
    rows = []
    for e in events:
        detail = {k: v for k, v in e.detail.items() if k not in ("step_id", "attempt")}
        rows.append(
            (
                str(e.id),
                e.at.strftime("%H:%M:%S.%f")[:-3],
                e.kind,
                e.step_id or "",
                str(e.attempt or ""),
                clip(json.dumps(detail, ensure_ascii=False, default=str), 300),
            )
        )
    print_rows(
        (
            Col("#", justify="right"),
            Col("time"),
            Col("event", whole=True),
            Col("step", whole=True, label=True),
            Col("try", label=True),
            Col("detail", head=False),
        ),
        rows,
    )


@commands.command()
def summary(thread_id: str, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Totals from the event log: time busy and waiting, retries, failures, people, cost."""
    with errors(as_json), open_store(db, None, existing=True) as ow:
        s = ow.summary(thread_id)
    if as_json:
        dump(s.model_dump(mode="json"))
        return
    print_plain(f"run {s.thread_id}: {s.status}")
    print_plain(
        f"time {s.total_seconds:.1f}s (busy {s.busy_seconds:.1f}s, waiting for people "
        f"{s.waiting_seconds:.1f}s) · steps {s.steps_done}/{s.steps} · model calls "
        f"{s.model_calls}, tokens {s.input_tokens}+{s.output_tokens}, cost {s.cost:.4f}"
    )
    if s.retries:
        out.print("retries: " + ", ".join(f"{k} {v}" for k, v in s.retries.items()), markup=False)
    if s.failures_by_class:
        out.print("failures: " + ", ".join(f"{k} {v}" for k, v in s.failures_by_class.items()))
    for i in s.interventions:
        print_plain(
            f"person: {i.step_id} {i.kind} → {i.action or 'open'} by {i.by or '-'} after "
            f"{i.waited_seconds:.1f}s"
        )


@commands.command()
def history(
    thread_id: str,
    limit: Annotated[
        int | None, typer.Option(min=1, help="Show at most this many saved states.")
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A run's saved states (checkpoints), newest first: step back with `show --at`."""
    with errors(as_json), open_store(db, None, existing=True) as ow:
        rows = ow.history(thread_id, limit)
    if as_json:
        dump(rows)
        return
    print_rows(
        (
            Col("checkpoint", whole=True),
            Col("step", label=True),
            Col("node", whole=True),
            Col("next", label=True),
            Col("status"),
            Col("time"),
        ),
        [
            (
                r["checkpoint_id"],
                str(r["step"]),
                str(r["node"]),
                ",".join(r["next"]),
                r["status"],
                str(r["created_at"])[:19].replace("T", " "),
            )
            for r in rows
        ],
    )


def _failure(rec: Any) -> Text:
    """A step's failure at a checkpoint: its class, the error's type and message."""
    f = rec.failure
    what = "failure" if rec.status.value == "failed" else "last failure"
    kind = f" ({f.error_type})" if f.error_type else ""
    return Text(f"{what} {f.failure_class.value}{kind}: {clip(f.message, 200)}")


def _routes(state: Any, nxt: list[str]) -> list[str]:
    """How the run leaves this checkpoint because of a failed step: the route its failure
    class takes (graph/routes.py's table) to a node that runs next, else what runs next."""
    from onward.graph.routes import FAILURE_ROUTES

    lines = []
    for s in state.plan.steps:
        rec = state.record(s.id)
        if rec.status.value != "failed" or rec.failure is None:
            continue
        cls = rec.failure.failure_class
        taken = [t.value for t in FAILURE_ROUTES[cls] if t.value in nxt]
        lines.append(f"route: {s.id} failed ({cls.value}) → {', '.join(taken or nxt) or '(end)'}")
    return lines


@commands.command()
def show(
    thread_id: str,
    at: Annotated[str | None, typer.Option("--at", help="A checkpoint id from `history`.")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The run's state at a checkpoint (default: the latest)."""
    from rich.padding import Padding

    from onward.nodes.verify import pending_checks

    with errors(as_json), open_store(db, None, existing=True) as ow:
        state, nxt = ow.state_at(thread_id, at)
        checks = pending_checks(ow.deps, state)
    data = {
        "thread_id": thread_id,
        "checkpoint_id": at,
        "next": nxt,
        "pending_checks": checks,
        "values": state.model_dump(mode="json"),
    }
    if as_json:
        dump(data)
        return
    print_plain(f"status {state.status.value} · next {', '.join(nxt) or '(end)'}")
    for line in _routes(state, nxt):
        print_plain(line)
    for s in state.plan.steps:
        rec = state.record(s.id)
        print_plain(
            f"  {s.id:<20} {rec.status.value:<10} attempts {rec.attempts}  {s.tool} "
            f"{json.dumps(s.args, ensure_ascii=False)[:80]}"
        )
        if rec.failure is not None:
            out.print(Padding(_failure(rec), (0, 0, 0, 4), expand=False))
        if s.id in checks:  # produced, not yet verified
            kinds = ", ".join(c["check"] for c in checks[s.id]) or "none (the tool has none)"
            summary = rec.output.summary if rec.output else ""
            print_plain(f"  {'':<20} output {summary[:80]} · checks pending: {kinds}")


@commands.command()
def replay(
    thread_id: str,
    delay: Annotated[float, typer.Option(min=0, help="Seconds between events.")] = 0.3,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Walk a run's timeline event by event in the terminal."""
    with errors(as_json), open_store(db, None, existing=True) as ow:
        events = ow.timeline(thread_id)
    if as_json:
        dump([e.model_dump(mode="json") for e in events])
        return
    start = events[0].at if events else None
    for e in events:
        offset = (e.at - start).total_seconds() if start else 0.0
        what = e.detail.get("message") or e.detail.get("failure_class") or ""
        print_plain(
            f"+{offset:8.3f}s  {e.kind:<20} {e.step_id or '':<16} "
            f"{'try ' + str(e.attempt) if e.attempt else '':<6} {str(what)[:80]}"
        )
        if delay:
            time.sleep(delay)


@commands.command()
def report(
    thread_id: str,
    html: Annotated[Path, typer.Option("--html", help="Where to write the HTML page.")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a run as one self-contained HTML page (timeline, events, summary)."""
    with errors(as_json), open_store(db, None, existing=True) as ow:
        page = ow.report_html(thread_id)
    html.parent.mkdir(parents=True, exist_ok=True)
    html.write_text(page, encoding="utf-8")
    if as_json:
        dump({"thread_id": thread_id, "html": str(html), "bytes": len(page.encode())})
    else:
        err.print(f"wrote {html}", highlight=False)


@commands.command()
def graph(
    flow: Annotated[
        bool,
        typer.Option(
            "--flow",
            help="How a step flows: the scheduler drawn as one node (the README's view) "
            "instead of the exact compiled graph.",
        ),
    ] = False,
) -> None:
    """Print the graph as a Mermaid diagram (the exact compiled graph, as Studio shows it)."""
    from onward.graph.build import flow_mermaid, mermaid

    say(flow_mermaid() if flow else mermaid(), end="")
