"""The ``onward`` command line (Typer + Rich).

Exit codes: 0 run done · 1 run failed · 2 usage or validation error ·
3 waiting for a human or suspended · 4 busy (the database or run is held by another process).
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from onward.checkpointing.store import default_url
from onward.client import Onward, RunView
from onward.demo import DEMO_GOAL, write_sample_orders
from onward.errors import (
    OnwardError,
    UsageError,
)
from onward.inbox import PendingDecision
from onward.policy import ExpiryAction, RunPolicy, load_policy_file, parse_duration
from onward.progress import EventKind, ProgressEvent
from onward.state import Budget, RunFailureKind, RunStatus, StepStatus
from onward.worker import Worker, WorkerPolicy

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


ToolListOpt = list[str] | None


def _names(values: list[str] | None) -> frozenset[str]:
    return frozenset(n.strip() for v in values or [] for n in v.split(",") if n.strip())


def _policy(
    policy_file: Path | None,
    approve_plan: bool,
    approve_tools: list[str] | None,
    auto_approve: list[str] | None,
    allow_tools: list[str] | None,
    remind_after: str | None,
    expire_after: str | None,
    on_expiry: ExpiryAction | None,
) -> RunPolicy:
    """The run's policy: the --policy file, then the flags on top of it."""
    base = load_policy_file(policy_file) if policy_file else RunPolicy()
    deadline = base.deadline
    if remind_after:
        deadline = deadline.model_copy(update={"remind_after": parse_duration(remind_after)})
    if expire_after:
        deadline = deadline.model_copy(update={"expire_after": parse_duration(expire_after)})
    if on_expiry:
        deadline = deadline.model_copy(update={"on_expiry": on_expiry})
    allowed = _names(allow_tools)
    return base.model_copy(
        update={
            "approve_plan": base.approve_plan or approve_plan,
            "approve_tools": base.approve_tools | _names(approve_tools),
            "auto_approve": base.auto_approve | _names(auto_approve),
            "allow_tools": (base.allow_tools or frozenset()) | allowed
            if allowed
            else base.allow_tools,
            "deadline": deadline,
        }
    )


PolicyFileOpt = Annotated[
    Path | None,
    typer.Option("--policy", help="Policy file (YAML/JSON): approvals, allowlist, deadlines."),
]
ApprovePlanOpt = Annotated[
    bool, typer.Option("--approve-plan", help="A person approves the plan before any step runs.")
]
ApproveToolsOpt = Annotated[
    ToolListOpt,
    typer.Option("--approve-tools", help="Tools that also need approval in this run (a,b)."),
]
AutoApproveOpt = Annotated[
    ToolListOpt,
    typer.Option(
        "--auto-approve",
        help="Tools you approve in advance for every step of this run (a,b): they never stop.",
    ),
]
AllowToolsOpt = Annotated[
    ToolListOpt,
    typer.Option("--allow-tools", help="The only tools this run may use (a,b)."),
]
RemindOpt = Annotated[
    str | None, typer.Option("--remind-after", help="Remind about a waiting decision (6h).")
]
ExpireOpt = Annotated[
    str | None, typer.Option("--expire-after", help="A waiting decision expires (24h).")
]
OnExpiryOpt = Annotated[
    ExpiryAction | None,
    typer.Option("--on-expiry", help="At expiry: reject it, or suspend the run (reject)."),
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
        code = exc.exit_code  # each error knows it (onward.errors)
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
        count = Counter(s.status for s in view.steps)
        remaining = count[StepStatus.PENDING] + count[StepStatus.RUNNING]
        out.print(
            f"done {count[StepStatus.DONE]} · failed {count[StepStatus.FAILED]} · skipped "
            f"{count[StepStatus.SKIPPED]} · remaining {remaining}",
            highlight=False,
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


Go = Callable[[Callable[[ProgressEvent], None] | None], RunView]


def _drive(
    ow: Onward, thread_id: str, as_json: bool, takeover: bool = False, go: Go | None = None
) -> RunView:
    """Drive a run (or ``go``: answer a question and go on) with a progress bar."""
    if go is None:

        def go(on_event: Callable[[ProgressEvent], None] | None) -> RunView:
            return ow.drive(thread_id, on_event, takeover=takeover)

    if as_json:
        return go(None)
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
            elif e.kind in (EventKind.STEP_WAITING, EventKind.APPROVAL_REQUESTED):
                bar.update(task, current=f"[yellow]⏸ {e.step_id}: {e.message[:60]}")
            elif e.kind is EventKind.RUN_FINISHED:
                bar.update(task, description=e.message, current="")

        # Skip steps already done when resuming, so the bar starts where the run is.
        state = ow.state(thread_id)
        if state.plan.steps:
            done = sum(s is StepStatus.DONE for s in state.steps.statuses.values())
            bar.update(task, description="running", total=len(state.plan.steps), completed=done)
        return go(on_event)


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
    policy_file: PolicyFileOpt = None,
    approve_plan: ApprovePlanOpt = False,
    approve_tools: ApproveToolsOpt = None,
    auto_approve: AutoApproveOpt = None,
    allow_tools: AllowToolsOpt = None,
    remind_after: RemindOpt = None,
    expire_after: ExpireOpt = None,
    on_expiry: OnExpiryOpt = None,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", min=1, help="Step executions in the whole run.")
    ] = None,
    max_run_time: Annotated[
        str | None, typer.Option("--max-run-time", help="Wall time from the start (2h, 1d).")
    ] = None,
    max_replans: Annotated[
        int, typer.Option("--max-replans", min=0, help="Replans of one step before a person.")
    ] = 2,
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", min=1, help="Model tokens in the whole run.")
    ] = None,
    max_cost: Annotated[
        float | None, typer.Option("--max-cost", min=0, help="Model cost (USD) in the run.")
    ] = None,
    judge: Annotated[
        bool,
        typer.Option("--judge", help="A model reviews every step's output (needs a model)."),
    ] = False,
    no_escalate: Annotated[
        bool,
        typer.Option(
            "--no-escalate",
            help="Fail the run instead of waiting for a person when a step cannot recover "
            "on its own (unattended runs, CI).",
        ),
    ] = False,
) -> None:
    """Plan and run a goal (or a declared --plan) to the end, or until it waits for a person."""
    with _errors(as_json), _open(db, tools) as ow:
        tid = _start(ow.start, locals())
        if not as_json:
            err.print(
                f"thread id: [bold]{tid}[/]  (resume with `onward resume {tid}`)", highlight=False
            )
        view = _drive(ow, tid, as_json)
    _finish(view, as_json)


def _start(start: Callable[..., str], o: dict[str, Any]) -> str:
    """Create a run from ``run``'s options (``run`` and ``submit`` take the same ones)."""
    policy = _policy(
        o["policy_file"],
        o["approve_plan"],
        o["approve_tools"],
        o["auto_approve"],
        o["allow_tools"],
        o["remind_after"],
        o["expire_after"],
        o["on_expiry"],
    )
    if o["no_escalate"]:
        policy = policy.model_copy(update={"escalate_failures": False})
    return start(
        o["goal"],
        plan=o["plan"],
        inputs=o["inputs"] or [],
        workdir=o["workdir"],
        max_concurrency=o["max_concurrency"],
        thread_id=o["thread_id"],
        policy=policy,
        judge=o["judge"],
        budget=Budget(
            max_steps=o["max_steps"],
            max_run_time=parse_duration(o["max_run_time"]) if o["max_run_time"] else None,
            max_replans=o["max_replans"],
            max_tokens=o["max_tokens"],
            max_cost=o["max_cost"],
        ),
    )


def submit(**o: Any) -> None:
    """Put a goal (or a declared --plan) on the work queue and print its thread id; any
    `onward worker` on the same store drives it. Takes the same options as `run`."""
    with _errors(o["as_json"]), _open(o["db"], o["tools"]) as ow:
        tid = _start(ow.submit, o)
    if o["as_json"]:
        print(json.dumps({"thread_id": tid, "queued": True}))
    else:
        print(tid)


submit.__signature__ = inspect.signature(run, eval_str=True)  # type: ignore[attr-defined]
submit.__annotations__ = run.__annotations__
app.command()(submit)


@app.command()
def worker(
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="Runs this worker drives at once.")
    ] = 1,
    poll: Annotated[
        float, typer.Option("--poll", min=0.01, help="Seconds between looks at an empty queue.")
    ] = 1.0,
    exit_when_idle: Annotated[
        bool,
        typer.Option(
            "--exit-when-idle",
            help="Exit once no queued run can become ready without a person (batch jobs).",
        ),
    ] = False,
    db: DbOpt = None,
    tools: ToolsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Claim queued and resumable runs from the store and drive them, until SIGTERM or
    Ctrl-C: then finish the current superstep, requeue, release leases and exit."""
    policy = WorkerPolicy(concurrency=concurrency, poll=poll, exit_when_idle=exit_when_idle)

    def log(thread_id: str, outcome: str) -> None:
        if as_json:
            print(json.dumps({"thread_id": thread_id, "outcome": outcome}), flush=True)
        else:
            err.print(f"{thread_id}: {outcome}", highlight=False)

    with _errors(as_json):
        w = Worker(db or default_url(), policy=policy, tool_modules=tools or [], on_drive=log)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: w.drain())
        report = w.run()
    summary = {
        "drives": report.drives,
        "finished": len(report.finished),
        "errors": len(report.errors),
        "drained": report.drained,
    }
    if as_json:
        print(json.dumps({"worker": summary}), flush=True)
    else:
        err.print(
            f"worker stopped: {summary['drives']} drives, {summary['finished']} runs finished, "
            f"{summary['errors']} errors" + (" (drained)" if report.drained else ""),
            highlight=False,
        )


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8420,
    workdir: Annotated[
        Path | None, typer.Option(help="Where runs started through the API work (default: cwd).")
    ] = None,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--cors-origin",
            help="A browser origin allowed to call the API from another site, e.g. a chat "
            "frontend at http://localhost:3000 (repeatable; also $ONWARD_CORS_ORIGINS).",
        ),
    ] = None,
    db: DbOpt = None,
    tools: ToolsOpt = None,
    policy_file: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            help="The run policy of every API run (YAML/JSON); a start request may only "
            "tighten it.",
        ),
    ] = None,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", min=1, help="Step executions per API run.")
    ] = None,
    max_run_time: Annotated[
        str | None, typer.Option("--max-run-time", help="Wall time of an API run (2h, 1d).")
    ] = None,
    max_body: Annotated[
        int | None,
        typer.Option("--max-body", min=1024, help="Largest request body in bytes (4 MiB)."),
    ] = None,
    run_slots: Annotated[
        int | None, typer.Option("--run-slots", min=1, help="Runs driven at once (8).")
    ] = None,
    user_runs: Annotated[
        int | None, typer.Option("--user-runs", min=1, help="Runs in flight per user (4).")
    ] = None,
    open_docs: Annotated[
        bool,
        typer.Option("--open-docs", help="Serve /docs and /openapi.json without a token."),
    ] = False,
    no_recover: Annotated[
        bool,
        typer.Option(
            "--no-recover",
            help="Leave runs whose driver died to `onward worker` processes.",
        ),
    ] = False,
) -> None:
    """Serve the LangGraph Server API (langgraph_sdk, RemoteGraph, agent-chat-ui) and a web
    page at / on this store. Tokens: $ONWARD_API_TOKENS=token:user,... (else open)."""
    try:
        import uvicorn

        from onward.serve import create_app
        from onward.serve.limits import ServeLimits
    except ImportError:
        err.print("onward serve needs the serve extra: pip install 'onward[serve]'")
        raise typer.Exit(EXIT_USAGE) from None
    with _errors(False):
        env = ServeLimits.from_env(dict(os.environ))
        slots = run_slots or env.run_slots
        limits = ServeLimits(
            max_body=max_body or env.max_body,
            run_slots=slots,
            user_runs=user_runs or min(env.user_runs, slots),
        )
        app_ = create_app(
            db or default_url(),
            workdir=workdir,
            tool_modules=tools or [],
            cors_origins=cors_origin or None,
            policy=load_policy_file(policy_file) if policy_file else None,
            budget=Budget(
                max_steps=max_steps,
                max_run_time=parse_duration(max_run_time) if max_run_time else None,
            ),
            limits=limits,
            open_docs=open_docs,
            recover=not no_recover,
        )
    err.print(f"onward serving {db or default_url()} on http://{host}:{port}/", highlight=False)
    uvicorn.run(app_, host=host, port=port, log_level="warning")


@app.command()
def prune(
    older_than: Annotated[
        str,
        typer.Option("--older-than", help="Remove finished runs last updated before this (30d)."),
    ],
    keep_last: Annotated[
        int, typer.Option("--keep-last", min=0, help="Always keep the N newest finished runs.")
    ] = 0,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")
    ] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove finished runs (checkpoints, events, ledger rows, artifacts no kept run uses);
    never anything a waiting or resumable run needs. Then VACUUM and report what was freed."""
    with _errors(as_json), _open(db, None) as ow:
        report = ow.prune(parse_duration(older_than), keep_last=keep_last, dry_run=dry_run)
    if as_json:
        print(report.model_dump_json(indent=2))
        return
    freed = "" if dry_run else f" ({report.rows} rows, {report.artifact_bytes} artifact bytes)"
    out.print(
        f"{'would remove' if dry_run else 'removed'} {len(report.removed)} finished runs"
        f"{freed}; kept {report.kept} finished, {report.skipped} not finished",
        highlight=False,
    )
    if not dry_run:
        out.print(
            f"database: {report.db_bytes_before} → {report.db_bytes_after} bytes", highlight=False
        )


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
    no_wait: Annotated[
        bool,
        typer.Option(
            "--no-wait",
            help="If the run is suspended until a time (retry backoff, open breaker), say when "
            "and exit (code 3) instead of waiting.",
        ),
    ] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    tools: ToolsOpt = None,
) -> None:
    """Finish a run that stopped (crash, kill, Ctrl-C); completed steps are not run again."""
    with _errors(as_json), _open(db, tools) as ow:
        ow.get(thread_id)  # unknown thread → clear error before any progress output

        def go(on_event: Callable[[ProgressEvent], None] | None) -> RunView:
            return ow.drive(thread_id, on_event, takeover=takeover, wait=not no_wait)

        view = _drive(ow, thread_id, as_json, go=go)
    _finish(view, as_json)


class ResolveAs(StrEnum):
    done = "done"
    retry = "retry"
    skip = "skip"


StepOpt = Annotated[
    str | None, typer.Option("--step", help="Which waiting step ('plan' for the plan).")
]
TokenOpt = Annotated[
    str | None, typer.Option("--token", help="Resume token from `onward inbox` (ONWARD_SECRET).")
]
UserOpt = Annotated[
    str | None, typer.Option("--user", help="Who decides (default $ONWARD_USER, else login@host).")
]
NoContinueOpt = Annotated[
    bool,
    typer.Option("--no-continue", help="Only record the decision; `onward resume` goes on later."),
]
InterruptOpt = Annotated[
    str | None, typer.Option("--interrupt-id", help="Which question, by interrupt id.")
]


def _answer(
    ow: Onward,
    thread_id: str,
    call: Callable[..., RunView],
    *,
    as_json: bool,
    no_continue: bool,
    token: str | None,
    user: str | None,
    interrupt_id: str | None,
) -> None:
    """Answer a question with ``call`` (ow.approve / reject / respond, bound to its
    arguments), then go on driving unless --no-continue."""
    ow.get(thread_id)  # unknown thread → clear error before any progress output

    def go(on_event: Callable[[ProgressEvent], None] | None) -> RunView:
        return call(
            token=token,
            by=user,
            continue_run=not no_continue,
            on_event=on_event,
            interrupt_id=interrupt_id,
        )

    view = _drive(ow, thread_id, as_json or no_continue, go=go)
    if no_continue:
        if as_json:
            print(_view_json(view))
        else:
            _print_view(view)
            err.print(f"recorded; continue with `onward resume {thread_id}`", highlight=False)
        raise typer.Exit(EXIT_DONE)
    _finish(view, as_json)


def _how(
    as_json: bool, no_continue: bool, token: str | None, user: str | None, iid: str | None
) -> dict[str, Any]:
    return {
        "as_json": as_json,
        "no_continue": no_continue,
        "token": token,
        "user": user,
        "interrupt_id": iid,
    }


def _edits(edit: list[str] | None, args_file: Path | None) -> tuple[dict[str, Any] | None, Any]:
    if args_file is not None:
        try:
            args = yaml.safe_load(args_file.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise UsageError(f"cannot read --args-file {args_file}: {exc}") from None
        if not isinstance(args, dict):
            raise UsageError(f"--args-file {args_file} must hold a mapping of args")
        return None, args
    if not edit:
        return None, None
    changes: dict[str, Any] = {}
    for item in edit:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--edit {item!r}: write key=value (value as YAML: 5, true, text)")
        changes[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
    return changes, None


@app.command()
def inbox(
    user: UserOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Every decision waiting for a person, across all runs (oldest first)."""
    with _errors(as_json), _open(db, None) as ow:
        items = ow.inbox(user=user)
    if as_json:
        print(json.dumps([i.model_dump(mode="json") for i in items], indent=2, ensure_ascii=False))
        return
    if not items:
        out.print("nothing is waiting for a decision")
        return
    table = Table(show_edge=False)
    table.add_column("thread id", no_wrap=True, min_width=36)
    for col in ("step", "kind", "tool", "args", "waiting since", "deadline"):
        table.add_column(col)
    for i in items:
        table.add_row(
            i.thread_id,
            i.step_id or "plan",
            i.kind.value,
            i.tool,
            json.dumps(i.args, ensure_ascii=False)[:80],
            i.asked_at.strftime("%Y-%m-%d %H:%M"),
            f"{i.expire_at.strftime('%Y-%m-%d %H:%M')} → {i.on_expiry.value}",
        )
    out.print(table)
    for i in items:
        if i.token:
            out.print(f"token {i.thread_id} {i.step_id or 'plan'}: {i.token}", highlight=False)


@app.command()
def approve(
    thread_id: str,
    step: StepOpt = None,
    edit: Annotated[
        list[str] | None, typer.Option("--edit", help="Change one arg: key=value (repeatable).")
    ] = None,
    args_file: Annotated[
        Path | None, typer.Option("--args-file", help="Replace all args (YAML/JSON file).")
    ] = None,
    reason: Annotated[str, typer.Option(help="Comment for the decision log.")] = "",
    token: TokenOpt = None,
    user: UserOpt = None,
    no_continue: NoContinueOpt = False,
    interrupt_id: InterruptOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    tools: ToolsOpt = None,
) -> None:
    """Approve a waiting step (optionally with edited args) and continue the run."""
    how = _how(as_json, no_continue, token, user, interrupt_id)
    with _errors(as_json), _open(db, tools) as ow:
        changes, replaced = _edits(edit, args_file)
        call = partial(ow.approve, thread_id, step, edit=changes, args=replaced, reason=reason)
        _answer(ow, thread_id, call, **how)


@app.command()
def reject(
    thread_id: str,
    reason: Annotated[str, typer.Option("--reason", help="Why; kept in the decision log.")],
    step: StepOpt = None,
    token: TokenOpt = None,
    user: UserOpt = None,
    no_continue: NoContinueOpt = False,
    interrupt_id: InterruptOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    tools: ToolsOpt = None,
) -> None:
    """Reject a waiting step: it and the steps that depend on it are skipped."""
    how = _how(as_json, no_continue, token, user, interrupt_id)
    with _errors(as_json), _open(db, tools) as ow:
        _answer(ow, thread_id, partial(ow.reject, thread_id, step, reason=reason), **how)


@app.command()
def respond(
    thread_id: str,
    text: Annotated[str, typer.Argument(help="Your feedback, recorded for replanning.")],
    step: StepOpt = None,
    token: TokenOpt = None,
    user: UserOpt = None,
    no_continue: NoContinueOpt = False,
    interrupt_id: InterruptOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    tools: ToolsOpt = None,
) -> None:
    """Answer a waiting step with feedback instead of a decision."""
    how = _how(as_json, no_continue, token, user, interrupt_id)
    with _errors(as_json), _open(db, tools) as ow:
        _answer(ow, thread_id, partial(ow.respond, thread_id, text, step), **how)


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
    token: TokenOpt = None,
    user: UserOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Settle an effect whose outcome is unknown (an escalation); then `onward resume`."""
    with _errors(as_json), _open(db, None) as ow:
        result: Any = None
        if result_file is not None:
            try:
                result = json.loads(result_file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise UsageError(f"cannot read --result-file {result_file}: {exc}") from None
        view = ow.resolve(
            thread_id, step, action.value, result=result, reason=reason, token=token, by=user
        )
    if as_json:
        print(_view_json(view))
    else:
        _print_view(view)
        err.print(f"decided; continue with `onward resume {thread_id}`", highlight=False)


@app.command()
def cancel(
    thread_id: str,
    compensate: Annotated[
        bool,
        typer.Option(
            "--compensate", help="Undo completed side effects, newest first (each at most once)."
        ),
    ] = False,
    reason: Annotated[str, typer.Option(help="Why; kept in the decision log.")] = "",
    user: UserOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    tools: ToolsOpt = None,
) -> None:
    """Cancel a run (a live driver stops at its next step); optionally compensate effects."""
    with _errors(as_json), _open(db, tools) as ow:
        report = ow.cancel(thread_id, compensate=compensate, reason=reason, by=user)
    comps = [
        {"step_id": c.step_id, "tool": c.tool, "key": c.effect_key, "status": c.status.value}
        | ({"error": c.error} if c.error else {})
        for c in report.compensations
    ]
    if as_json:
        data = json.loads(_view_json(report.view))
        print(json.dumps(data | {"compensations": comps}, indent=2, ensure_ascii=False))
    else:
        _print_view(report.view)
        for c in comps:
            out.print(
                f"compensation {c['status']}: {c['step_id']} ({c['tool']})"
                + (f" — {c['error']}" if "error" in c else ""),
                highlight=False,
            )
    raise typer.Exit(EXIT_DONE if report.complete else EXIT_FAILED)


@app.command()
def sweep(
    now: Annotated[
        str | None, typer.Option("--now", help="Pretend it is this ISO time (for drills).")
    ] = None,
    no_continue: NoContinueOpt = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    tools: ToolsOpt = None,
) -> None:
    """Apply deadlines: record reminders; at expiry reject (or suspend) waiting decisions."""
    with _errors(as_json), _open(db, tools) as ow:
        try:
            at = datetime.fromisoformat(now) if now else None
        except ValueError:
            raise UsageError(f"--now {now!r} is not an ISO date-time") from None
        if at is not None and at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        report = ow.sweep(at, continue_runs=not no_continue)

    def items(xs: list[PendingDecision]) -> list[dict[str, Any]]:
        return [{"thread_id": x.thread_id, "step_id": x.step_id, "kind": x.kind} for x in xs]

    found = {
        "reminded": items(report.reminded),
        "rejected": items(report.rejected),
        "suspended": items(report.suspended),
    }
    errors = [
        {"thread_id": x.thread_id, "step_id": x.step_id, "error": e} for x, e in report.errors
    ]
    if as_json:
        print(json.dumps({"now": report.now.isoformat(), **found, "errors": errors}, indent=2))
        return
    for e in errors:
        err.print(
            f"not applied (next sweep retries): {e['thread_id']}: {e['error']}", highlight=False
        )
    for what, xs in found.items():
        for x in xs:
            out.print(f"{what}: {x['thread_id']} {x['step_id'] or 'plan'}", highlight=False)
    if not any(found.values()):
        out.print("no deadline reached")


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


def _dump(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


@app.command("timeline")
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
    with _errors(as_json), _open(db, None) as ow:
        events = ow.timeline(thread_id, step=step, kinds=kind or ())
    if as_json:
        _dump([e.model_dump(mode="json") for e in events])
        return
    table = Table(show_edge=False)
    for col in ("#", "time", "event", "step", "try", "detail"):
        table.add_column(col)
    for e in events:
        detail = {k: v for k, v in e.detail.items() if k not in ("step_id", "attempt")}
        table.add_row(
            str(e.id),
            e.at.strftime("%H:%M:%S.%f")[:-3],
            Text(e.kind),
            Text(e.step_id or ""),
            str(e.attempt or ""),
            Text(json.dumps(detail, ensure_ascii=False, default=str)[:120]),
        )
    out.print(table)


@app.command()
def summary(thread_id: str, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Totals from the event log: time busy and waiting, retries, failures, people, cost."""
    with _errors(as_json), _open(db, None) as ow:
        s = ow.summary(thread_id)
    if as_json:
        _dump(s.model_dump(mode="json"))
        return
    out.print(f"run {s.thread_id}: {s.status}", highlight=False, markup=False)
    out.print(
        f"time {s.total_seconds:.1f}s (busy {s.busy_seconds:.1f}s, waiting for people "
        f"{s.waiting_seconds:.1f}s) · steps {s.steps_done}/{s.steps} · model calls "
        f"{s.model_calls}, tokens {s.input_tokens}+{s.output_tokens}, cost {s.cost:.4f}",
        highlight=False,
        markup=False,
    )
    if s.retries:
        out.print("retries: " + ", ".join(f"{k} {v}" for k, v in s.retries.items()), markup=False)
    if s.failures_by_class:
        out.print("failures: " + ", ".join(f"{k} {v}" for k, v in s.failures_by_class.items()))
    for i in s.interventions:
        out.print(
            f"person: {i.step_id} {i.kind} → {i.action or 'open'} by {i.by or '-'} after "
            f"{i.waited_seconds:.1f}s",
            highlight=False,
            markup=False,
        )


@app.command()
def history(
    thread_id: str,
    limit: Annotated[int | None, typer.Option(min=1)] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A run's saved states (checkpoints), newest first: step back with `show --at`."""
    with _errors(as_json), _open(db, None) as ow:
        rows = ow.history(thread_id, limit)
    if as_json:
        _dump(rows)
        return
    table = Table(show_edge=False)
    for col in ("checkpoint", "step", "node", "next", "status", "time"):
        table.add_column(col, no_wrap=col == "checkpoint")
    for r in rows:
        table.add_row(
            *(
                Text(x)
                for x in (
                    r["checkpoint_id"],
                    str(r["step"]),
                    str(r["node"]),
                    ",".join(r["next"]),
                    r["status"],
                    str(r["created_at"])[:23],
                )
            )
        )
    out.print(table)


@app.command()
def show(
    thread_id: str,
    at: Annotated[str | None, typer.Option("--at", help="A checkpoint id from `history`.")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The run's state at a checkpoint (default: the latest)."""
    with _errors(as_json), _open(db, None) as ow:
        state, nxt = ow.state_at(thread_id, at)
    data = {
        "thread_id": thread_id,
        "checkpoint_id": at,
        "next": nxt,
        "values": state.model_dump(mode="json"),
    }
    if as_json:
        _dump(data)
        return
    out.print(
        f"status {state.status.value} · next {', '.join(nxt) or '(end)'}",
        highlight=False,
        markup=False,
    )
    for s in state.plan.steps:
        rec = state.record(s.id)
        out.print(
            f"  {s.id:<20} {rec.status.value:<10} attempts {rec.attempts}  {s.tool} "
            f"{json.dumps(s.args, ensure_ascii=False)[:80]}",
            highlight=False,
            markup=False,
        )


@app.command()
def fork(
    thread_id: str,
    at: Annotated[str, typer.Option("--at", help="The checkpoint to continue from.")],
    edit: Annotated[
        list[str] | None,
        typer.Option("--edit", help="Change a step's arg: STEP.ARG=VALUE (repeatable)."),
    ] = None,
    no_continue: NoContinueOpt = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    tools: ToolsOpt = None,
) -> None:
    """Continue a run from a past state as a new run (the original stays intact)."""
    with _errors(as_json), _open(db, tools) as ow:
        changes, _ = _edits(edit, None)
        new_id = ow.fork(thread_id, at, changes)
        if not as_json:
            err.print(f"forked as {new_id}", highlight=False, markup=False)
        view = ow.get(new_id) if no_continue else _drive(ow, new_id, as_json)
    _finish(view, as_json)


@app.command()
def replay(
    thread_id: str,
    delay: Annotated[float, typer.Option(min=0, help="Seconds between events.")] = 0.3,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Walk a run's timeline event by event in the terminal."""
    with _errors(as_json), _open(db, None) as ow:
        events = ow.timeline(thread_id)
    if as_json:
        _dump([e.model_dump(mode="json") for e in events])
        return
    start = events[0].at if events else None
    for e in events:
        offset = (e.at - start).total_seconds() if start else 0.0
        what = e.detail.get("message") or e.detail.get("failure_class") or ""
        out.print(
            f"+{offset:8.3f}s  {e.kind:<20} {e.step_id or '':<16} "
            f"{'try ' + str(e.attempt) if e.attempt else '':<6} {str(what)[:80]}",
            highlight=False,
            markup=False,
        )
        if delay:
            time.sleep(delay)


@app.command()
def report(
    thread_id: str,
    html: Annotated[Path, typer.Option("--html", help="Where to write the HTML page.")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a run as one self-contained HTML page (timeline, events, summary)."""
    with _errors(as_json), _open(db, None) as ow:
        page = ow.report_html(thread_id)
    html.parent.mkdir(parents=True, exist_ok=True)
    html.write_text(page, encoding="utf-8")
    if as_json:
        _dump({"thread_id": thread_id, "html": str(html), "bytes": len(page.encode())})
    else:
        err.print(f"wrote {html}", highlight=False)


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
