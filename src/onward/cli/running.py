"""Starting and driving runs: run, submit, resume, demo; the progress bar every driving
command shows, and how a driven run ends the command (its view, then its exit code)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.table import Table
from rich.text import Text

from onward.cli.options import (
    DbOpt,
    InterruptBeforeOpt,
    JsonOpt,
    JudgeModelOpt,
    McpOpt,
    ModelOpt,
    OnExpiry,
    PlannerModelOpt,
    StepModelOpt,
    ToolsOpt,
    duration,
    errors,
    exit_code,
    open_store,
)
from onward.cli.render import err, out, print_plain, print_view, say, view_json
from onward.errors import UsageError

if TYPE_CHECKING:
    from onward.client import Onward, RunView
    from onward.observe.progress import ProgressEvent
    from onward.policies.run import RunPolicy

    Go = Callable[[Callable[[ProgressEvent], None] | None], RunView]

commands = typer.Typer()

ToolListOpt = list[str] | None
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
    OnExpiry | None,
    typer.Option("--on-expiry", help="At expiry: reject it, or suspend the run (reject)."),
]


def drive(
    ow: Onward, thread_id: str, as_json: bool, takeover: bool = False, go: Go | None = None
) -> RunView:
    """Drive a run (or ``go``: answer a question and go on) with a progress bar."""
    if go is None:

        def go(on_event: Callable[[ProgressEvent], None] | None) -> RunView:
            return ow.drive(thread_id, on_event, takeover=takeover)

    if as_json:
        return go(None)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from onward.model.state import StepStatus
    from onward.observe.kinds import EventKind

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


def finish(view: RunView, as_json: bool, extra: Callable[[RunView], None] | None = None) -> None:
    """Print a driven run (and ``extra``) and exit with its code."""
    if as_json:
        say(view_json(view))
    else:
        # The view says each thing once: the execution report (the chat's final message)
        # repeats the step table and artifacts, so it is not printed after it.
        print_view(view)
        if extra:
            extra(view)
    raise typer.Exit(exit_code(view))


@commands.command()
def run(
    goal: Annotated[str | None, typer.Argument(help="What to do, in plain words.")] = None,
    plan: Annotated[Path | None, typer.Option("--plan", help="Declared plan (YAML/JSON).")] = None,
    inputs: Annotated[
        list[str] | None, typer.Option("--input", help="Input file (repeatable).")
    ] = None,
    workdir: Annotated[Path | None, typer.Option(help="Work directory (default: cwd).")] = None,
    max_concurrency: Annotated[
        int | None, typer.Option(min=1, help="Steps run at once in a parallel wave.")
    ] = None,
    thread_id: Annotated[
        str | None, typer.Option("--thread-id", help="The run's id (default: a new UUID).")
    ] = None,
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
    max_plan_steps: Annotated[
        int | None,
        typer.Option("--max-plan-steps", min=1, help="Steps a plan may hold (default 300)."),
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
    interrupt_before: InterruptBeforeOpt = None,
    mcp: McpOpt = None,
    model: ModelOpt = None,
    planner_model: PlannerModelOpt = None,
    step_model: StepModelOpt = None,
    judge_model: JudgeModelOpt = None,
) -> None:
    """Plan and run a goal (or a declared --plan) to the end, or until it waits for a person."""
    with errors(as_json), _open(db, tools, mcp, locals()) as ow:
        tid = _start(ow.start, locals())
        if not as_json:
            err.print(
                f"thread id: [bold]{tid}[/]  (resume with `onward resume {tid}`)", highlight=False
            )

        def go(on_event: Callable[[ProgressEvent], None] | None) -> RunView:
            return ow.drive(tid, on_event, interrupt_before=interrupt_before or ())

        view = drive(ow, tid, as_json, go=go)
    finish(view, as_json)


def _open(
    db: str | None, tools: list[str] | None, mcp: list[str] | None, o: dict[str, Any]
) -> Onward:
    """The store, with the --mcp servers' tools and the --model options' models."""
    from onward.llm.models import ModelChoice

    choice = ModelChoice(o["model"], o["planner_model"], o["step_model"], o["judge_model"])
    return open_store(db, tools, mcp=mcp, models=choice)


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
    on_expiry: OnExpiry | None,
) -> RunPolicy:
    """The run's policy: the --policy file, then the flags on top of it."""
    from onward.policies.run import ExpiryAction, RunPolicy, load_policy_file

    base = load_policy_file(policy_file) if policy_file else RunPolicy()
    deadline = base.deadline
    if remind_after:
        deadline = deadline.model_copy(
            update={"remind_after": duration(remind_after, "--remind-after")}
        )
    if expire_after:
        deadline = deadline.model_copy(
            update={"expire_after": duration(expire_after, "--expire-after")}
        )
    if on_expiry:
        deadline = deadline.model_copy(update={"on_expiry": ExpiryAction(on_expiry)})
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


def _start(start: Callable[..., str], o: dict[str, Any]) -> str:
    """Create a run from ``run``'s options (``run`` and ``submit`` take the same ones)."""
    from onward.model.state import Budget

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
    if o["max_plan_steps"] is not None:
        policy = policy.model_copy(update={"max_plan_steps": o["max_plan_steps"]})
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
            max_run_time=duration(o["max_run_time"], "--max-run-time"),
            max_replans=o["max_replans"],
            max_tokens=o["max_tokens"],
            max_cost=o["max_cost"],
        ),
    )


def submit(**o: Any) -> None:
    """Put a goal (or a declared --plan) on the work queue and print its thread id; any
    `onward worker` on the same store drives it. Takes the same options as `run`."""
    with errors(o["as_json"]):
        if any(o[k] for k in ("model", "planner_model", "step_model", "judge_model")):
            raise UsageError(
                "--model and the role models choose this process's models: a queued run is "
                "driven by a worker with its own (its ONWARD_MODEL...); use them with `onward "
                "run` or `onward resume`"
            )
    with errors(o["as_json"]), open_store(o["db"], o["tools"], mcp=o["mcp"]) as ow:
        if o["interrupt_before"]:
            raise UsageError(
                "--interrupt-before pauses a drive in this process: use it with `onward run` "
                "or `onward resume`, not with submit (a worker drives queued runs)"
            )
        tid = _start(ow.submit, o)
    if o["as_json"]:
        say(json.dumps({"thread_id": tid, "queued": True}))
    else:
        say(tid)


submit.__signature__ = inspect.signature(run, eval_str=True)  # type: ignore[attr-defined]
submit.__annotations__ = run.__annotations__
commands.command()(submit)


@commands.command()
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
    interrupt_before: InterruptBeforeOpt = None,
    mcp: McpOpt = None,
    model: ModelOpt = None,
    planner_model: PlannerModelOpt = None,
    step_model: StepModelOpt = None,
    judge_model: JudgeModelOpt = None,
) -> None:
    """Finish a run that stopped (crash, kill, Ctrl-C); completed steps are not run again."""
    with errors(as_json), _open(db, tools, mcp, locals()) as ow:
        before = ow.get(thread_id)  # unknown thread → clear error before any progress output
        if before.status.finished:
            _already_finished(before, as_json)

        def go(on_event: Callable[[ProgressEvent], None] | None) -> RunView:
            return ow.drive(
                thread_id,
                on_event,
                takeover=takeover,
                wait=not no_wait,
                interrupt_before=interrupt_before or (),
            )

        view = drive(ow, thread_id, as_json, go=go)
    finish(view, as_json)


def _already_finished(view: RunView, as_json: bool) -> NoReturn:
    """``resume`` of a run that finished: say so (no progress bar, nothing driven) and exit
    with the code of how it ended."""
    if as_json:
        say(view_json(view))
    else:
        tid = view.thread_id
        out.print(f"run {tid} already finished: {view.status.value}", highlight=False)
        print_plain(
            f"nothing to resume. See it: onward show {tid}\n"
            "Go on from one of its checkpoints as a new run:\n"
            f"  onward history {tid}\n  onward fork {tid} --at CHECKPOINT",
            err,
        )
    raise typer.Exit(exit_code(view))


@commands.command()
def demo(
    workdir: Annotated[Path, typer.Option(help="Where to write orders.csv and the report.")] = Path(
        "onward-demo"
    ),
    rows: Annotated[int, typer.Option(min=10, help="Orders in the sample file.")] = 200,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Offline demo: write a sample orders.csv and analyse it (no API key, no network)."""
    from onward.demo import DEMO_GOAL, write_sample_orders

    workdir.mkdir(parents=True, exist_ok=True)
    expected = write_sample_orders(workdir / "orders.csv", rows=rows)
    if not as_json:
        err.print(
            f"wrote {workdir / 'orders.csv'} ({rows} orders, injected anomalies: "
            + ", ".join(f"{k} {v}" for k, v in expected.items())
            + ")",
            highlight=False,
        )
    with errors(as_json), open_store(db, None) as ow:
        tid = ow.start(DEMO_GOAL, inputs=["orders.csv"], workdir=workdir)
        if not as_json:
            err.print(f"thread id: [bold]{tid}[/]", highlight=False)
        view = drive(ow, tid, as_json)
        summary: dict[str, Any] = (
            view.artifact_value(ow, "summary") if ("summary" in view.artifacts) else {}
        )

    def counts(v: RunView) -> None:
        report = Path(v.workdir) / "orders-report.md"
        out.print(Text.assemble(("report: ", "dim"), str(report)), overflow="fold")
        table = Table(title="abnormal orders per rule", show_edge=False)
        table.add_column("rule")
        table.add_column("count", justify="right")
        for rule, n in summary.get("by_rule", {}).items():
            table.add_row(rule, str(n))
        out.print(table)

    finish(view, as_json, counts)
