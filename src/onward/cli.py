"""The ``onward`` command line (Typer + Rich).

Exit codes: 0 run done · 1 run failed · 2 usage or validation error ·
3 waiting for a human or suspended · 4 busy (the database or run is held by another process).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from onward.api import Onward, RunView
from onward.checkpointing.store import default_url
from onward.demo import DEMO_GOAL, write_sample_orders
from onward.errors import (
    InconsistentRunError,
    LeaseLostError,
    OnwardError,
    RunBusyError,
    StoreLockedError,
    UsageError,
)
from onward.progress import EventKind, ProgressEvent
from onward.state import RunFailureKind, RunStatus, StepStatus

EXIT_DONE, EXIT_FAILED, EXIT_USAGE, EXIT_WAITING, EXIT_BUSY = 0, 1, 2, 3, 4

app = typer.Typer(
    name="onward",
    help="Crash-safe long agent tasks: plan, execute, verify, resume by thread id.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)

DbOpt = Annotated[
    str | None,
    typer.Option("--db", help="Store URL (default: $ONWARD_DB, else sqlite:///.onward/onward.db)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
ToolsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--tools",
        help="Python file or module registering @onward.tool tools (repeatable; "
        "also $ONWARD_TOOLS, comma-separated).",
    ),
]


def exit_code(view: RunView) -> int:
    if view.status is RunStatus.DONE:
        return EXIT_DONE
    if view.status in (RunStatus.WAITING_FOR_HUMAN, RunStatus.SUSPENDED):
        return EXIT_WAITING
    if view.failure is not None and view.failure.kind is RunFailureKind.PLANNING:
        return EXIT_USAGE
    return EXIT_FAILED


@contextmanager
def _errors(as_json: bool) -> Iterator[None]:
    """OnwardErrors → a clear message and an exit code, never a traceback."""
    try:
        yield
    except OnwardError as exc:
        # A locked database is "busy" (4); everything else is bad input (2): a wrong path,
        # plan, thread id or a file that is not a database.
        busy = (StoreLockedError, RunBusyError, LeaseLostError)
        if isinstance(exc, busy):
            code = EXIT_BUSY
        elif isinstance(exc, InconsistentRunError):
            code = EXIT_WAITING  # stopped; a human must restore the artifact or fork
        else:
            code = EXIT_USAGE
        if as_json:
            print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
        else:
            # Text, not markup: messages quote user input such as regexes with [brackets].
            err.print(Text.assemble(("error: ", "bold red"), str(exc)), soft_wrap=True)
        raise typer.Exit(code) from None


def _open(db: str | None, tools: list[str] | None) -> Onward:
    return Onward(db or default_url(), tool_modules=tools or [])


def _view_json(view: RunView) -> str:
    return view.model_dump_json(indent=2)


def _print_view(view: RunView) -> None:
    colour = {"done": "green", "failed": "red"}.get(view.status.value, "yellow")
    shown = "stalled" if view.stalled else view.status.value
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
    if view.failure:
        out.print(f"[red]reason:[/] {view.failure.message}", highlight=False)
    for w in view.waiting:
        out.print(Text.assemble(("waiting: ", "yellow"), f"{w.step_id}: {w.reason}"))
        out.print(
            f"  key {w.key}  args {json.dumps(w.args, ensure_ascii=False)}",
            highlight=False,
            markup=False,
        )


def _drive(ow: Onward, thread_id: str, as_json: bool, takeover: bool = False) -> RunView:
    if as_json:
        return ow.drive(thread_id, takeover=takeover)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[current]}"),
        console=err,
        transient=False,
    ) as bar:
        task = bar.add_task("planning", total=None, current="")
        done = 0

        def on_event(e: ProgressEvent) -> None:
            nonlocal done
            if e.kind is EventKind.PLAN_CREATED:
                bar.update(task, description="running", total=e.total_steps)
            elif e.kind is EventKind.STEP_STARTED:
                bar.update(task, current=f"{e.step_id} ({e.tool})")
            elif e.kind is EventKind.STEP_DONE:
                done += 1
                bar.update(task, completed=done, current=f"✓ {e.step_id}")
            elif e.kind is EventKind.STEP_FAILED:
                bar.update(task, current=f"[red]✗ {e.step_id}: {e.message[:60]}")
            elif e.kind is EventKind.RUN_FINISHED:
                bar.update(task, description=e.message, current="")

        # Skip steps already done when resuming, so the bar starts where the run is.
        state = ow.state(thread_id)
        if state.plan.steps:
            done = sum(1 for r in state.steps.values() if r.status is StepStatus.DONE)
            bar.update(task, description="running", total=len(state.plan.steps), completed=done)
        return ow.drive(thread_id, on_event, takeover=takeover)


def _finish(view: RunView, as_json: bool, extra: Callable[[RunView], None] | None = None) -> None:
    if as_json:
        print(_view_json(view))
    else:
        _print_view(view)
        if extra:
            extra(view)
        elif view.report and view.status is RunStatus.DONE:
            out.print(view.report, highlight=False)
    raise typer.Exit(exit_code(view))


@app.command()
def run(
    goal: Annotated[str | None, typer.Argument(help="What to do, in plain words.")] = None,
    plan: Annotated[Path | None, typer.Option("--plan", help="Declared plan (YAML/JSON).")] = None,
    inputs: Annotated[
        list[str] | None, typer.Option("--input", help="Input file (repeatable).")
    ] = None,
    workdir: Annotated[Path | None, typer.Option(help="Work directory (default: cwd).")] = None,
    max_concurrency: Annotated[int | None, typer.Option(min=1)] = None,
    thread_id: Annotated[str | None, typer.Option("--thread-id")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    tools: ToolsOpt = None,
) -> None:
    """Plan and run a goal (or a declared --plan) to the end."""
    with _errors(as_json), _open(db, tools) as ow:
        tid = ow.start(
            goal,
            plan=plan,
            inputs=inputs or [],
            workdir=workdir,
            max_concurrency=max_concurrency,
            thread_id=thread_id,
        )
        if not as_json:
            err.print(
                f"thread id: [bold]{tid}[/]  (resume with `onward resume {tid}`)", highlight=False
            )
        view = _drive(ow, tid, as_json)
    _finish(view, as_json)


@app.command()
def resume(
    thread_id: str,
    takeover: Annotated[
        bool,
        typer.Option(
            "--takeover",
            help="If another driver's lease is live, wait for it to expire, then take the run "
            "over (for a driver that died).",
        ),
    ] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    tools: ToolsOpt = None,
) -> None:
    """Finish a run that stopped (crash, kill, Ctrl-C); completed steps are not run again."""
    with _errors(as_json), _open(db, tools) as ow:
        ow.get(thread_id)  # unknown thread → clear error before any progress output
        view = _drive(ow, thread_id, as_json, takeover)
    _finish(view, as_json)


class ResolveAs(StrEnum):
    done = "done"
    retry = "retry"
    skip = "skip"


@app.command()
def resolve(
    thread_id: str,
    step: Annotated[str, typer.Option("--step", help="The waiting step.")],
    action: Annotated[
        ResolveAs,
        typer.Option(
            "--as", help="done: it happened; retry: it did not, run it again; skip: leave it out."
        ),
    ],
    result_file: Annotated[
        Path | None,
        typer.Option("--result-file", help="JSON result of the effect (with --as done)."),
    ] = None,
    reason: Annotated[str, typer.Option(help="Why; kept in the decision log.")] = "",
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Settle a step waiting for a human (an effect whose outcome is unknown)."""
    with _errors(as_json), _open(db, None) as ow:
        result: Any = None
        if result_file is not None:
            try:
                result = json.loads(result_file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise UsageError(f"cannot read --result-file {result_file}: {exc}") from None
        view = ow.resolve(thread_id, step, action.value, result=result, reason=reason)
    if as_json:
        print(_view_json(view))
    else:
        _print_view(view)
        err.print(f"decided; continue with `onward resume {thread_id}`", highlight=False)


@app.command()
def status(thread_id: str, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Show a run's status and steps."""
    with _errors(as_json), _open(db, None) as ow:
        view = ow.get(thread_id)
    if as_json:
        print(_view_json(view))
    else:
        _print_view(view)


@app.command("list")
def list_runs(
    db: DbOpt = None,
    as_json: JsonOpt = False,
    limit: Annotated[int, typer.Option(min=1)] = 50,
) -> None:
    """List runs, newest first."""
    with _errors(as_json), _open(db, None) as ow:
        rows = ow.list_runs(limit)
        stalled = ow.stalled_threads()
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "thread_id": r.thread_id,
                        "status": r.status.value,
                        "stalled": r.thread_id in stalled,
                        "objective": r.objective,
                        "created_at": r.created_at.isoformat(),
                        "updated_at": r.updated_at.isoformat(),
                    }
                    for r in rows
                ],
                indent=2,
                ensure_ascii=False,
            )
        )
        return
    table = Table(show_edge=False)
    table.add_column("thread id", no_wrap=True, min_width=36)  # copyable for resume/status
    for col in ("status", "created", "goal"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r.thread_id,
            "stalled" if r.thread_id in stalled else r.status.value,
            r.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            r.objective[:60],
        )
    out.print(table)


@app.command()
def demo(
    workdir: Annotated[Path, typer.Option(help="Where to write orders.csv and the report.")] = Path(
        "onward-demo"
    ),
    rows: Annotated[int, typer.Option(min=10)] = 200,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Offline demo: write a sample orders.csv and analyse it (no API key, no network)."""
    workdir.mkdir(parents=True, exist_ok=True)
    expected = write_sample_orders(workdir / "orders.csv", rows=rows)
    if not as_json:
        err.print(
            f"wrote {workdir / 'orders.csv'} ({rows} orders, injected anomalies: "
            + ", ".join(f"{k} {v}" for k, v in expected.items())
            + ")",
            highlight=False,
        )
    with _errors(as_json), _open(db, None) as ow:
        tid = ow.start(DEMO_GOAL, inputs=["orders.csv"], workdir=workdir)
        if not as_json:
            err.print(f"thread id: [bold]{tid}[/]", highlight=False)
        view = _drive(ow, tid, as_json)
        summary: dict[str, Any] = (
            view.artifact_value(ow, "summary") if ("summary" in view.artifacts) else {}
        )

    def counts(v: RunView) -> None:
        report = Path(v.workdir) / "orders-report.md"
        out.print(f"\nthread id: [bold]{v.thread_id}[/]\nreport:    {report}", highlight=False)
        table = Table(title="abnormal orders per rule", show_edge=False)
        table.add_column("rule")
        table.add_column("count", justify="right")
        for rule, n in summary.get("by_rule", {}).items():
            table.add_row(rule, str(n))
        out.print(table)

    _finish(view, as_json, counts)


@app.command()
def graph() -> None:
    """Print the graph as a Mermaid diagram."""
    from onward.graph.build import mermaid

    print(mermaid(), end="")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted; resume the run with `onward resume THREAD`")
        sys.exit(130)
