"""Decisions a person makes: the inbox of waiting questions, approve / reject / respond /
resolve, and the deadline sweep that acts when nobody answers in time."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from onward.cli.options import (
    EXIT_DONE,
    DbOpt,
    JsonOpt,
    NoContinueOpt,
    ToolsOpt,
    UserOpt,
    edits,
    errors,
    open_store,
    read_inbox,
)
from onward.cli.render import Col, clip, dump, err, out, print_rows, print_view, say, view_json
from onward.cli.running import drive, finish
from onward.errors import UsageError

if TYPE_CHECKING:
    from onward.client import Onward, RunView
    from onward.observe.progress import ProgressEvent
    from onward.people.inbox import PendingDecision

commands = typer.Typer()


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
InterruptOpt = Annotated[
    str | None, typer.Option("--interrupt-id", help="Which question, by interrupt id.")
]
AllOpt = Annotated[
    bool, typer.Option("--all", help="Answer every question of the waiting wave at once.")
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

    view = drive(ow, thread_id, as_json or no_continue, go=go)
    if no_continue:
        if as_json:
            say(view_json(view))
        else:
            print_view(view)
            err.print(f"recorded; continue with `onward resume {thread_id}`", highlight=False)
        raise typer.Exit(EXIT_DONE)
    finish(view, as_json)


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


@commands.command()
def inbox(
    user: UserOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Every decision waiting for a person, across all runs (oldest first)."""
    with errors(as_json):
        items = read_inbox(db, user)
    if as_json:
        dump([i.model_dump(mode="json") for i in items])
        return
    if not items:
        out.print("nothing is waiting for a decision")
        return
    print_rows(
        (
            Col("thread id", whole=True),
            Col("step", whole=True, label=True),
            Col("kind"),
            Col("tool", whole=True),
            Col("args", head=False),
            Col("waiting since", head=False),
            Col("deadline", head=False),
        ),
        [
            (
                i.thread_id,
                i.step_id or "plan",
                i.kind.value,
                i.tool,
                clip(_shown_args(i.args, i.resolved), 300),
                i.asked_at.strftime("%Y-%m-%d %H:%M"),
                f"{i.expire_at.strftime('%Y-%m-%d %H:%M')} → {i.on_expiry.value}",
            )
            for i in items
        ],
    )
    for i in items:
        if i.token:
            out.print(f"token {i.thread_id} {i.step_id or 'plan'}: {i.token}", highlight=False)


def _shown_args(args: dict[str, Any], resolved: list[dict[str, str]]) -> str:
    """The args as written, then what each reference stands for: what approve runs."""
    text = json.dumps(args, ensure_ascii=False)
    return text + "".join(f"; {r['arg']} = {r['value']} (from {r['from']})" for r in resolved)


@commands.command()
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
    every: AllOpt = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    tools: ToolsOpt = None,
) -> None:
    """Approve a waiting step (optionally with edited args) and continue the run."""
    how = _how(as_json, no_continue, token, user, interrupt_id)
    with errors(as_json), open_store(db, tools) as ow:
        changes, replaced = edits(edit, args_file)
        if every:
            if step or changes or replaced:
                raise UsageError("--all approves every question as asked: no --step or edits")
            call = _for_all(ow, thread_id, {"type": "approve", "message": reason})
        else:
            call = partial(ow.approve, thread_id, step, edit=changes, args=replaced, reason=reason)
        _answer(ow, thread_id, call, **how)


def _for_all(ow: Onward, thread_id: str, one: dict[str, Any]) -> Callable[..., RunView]:
    """A call that gives ``one`` decision to every question of the waiting wave, in order."""
    from onward.client.deciding import answering

    def call(**how: Any) -> RunView:
        group, _ = answering(ow, thread_id, None, how.get("interrupt_id"), 2)
        return ow.decide(thread_id, [dict(one) for _ in group], **how)

    return call


@commands.command()
def reject(
    thread_id: str,
    reason: Annotated[str, typer.Option("--reason", help="Why; kept in the decision log.")],
    step: StepOpt = None,
    token: TokenOpt = None,
    user: UserOpt = None,
    no_continue: NoContinueOpt = False,
    interrupt_id: InterruptOpt = None,
    every: AllOpt = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    tools: ToolsOpt = None,
) -> None:
    """Reject a waiting step: it and the steps that depend on it are skipped."""
    how = _how(as_json, no_continue, token, user, interrupt_id)
    with errors(as_json), open_store(db, tools) as ow:
        if every and step:
            raise UsageError("--all rejects every question of the wave: no --step")
        call = (
            _for_all(ow, thread_id, {"type": "reject", "message": reason})
            if every
            else partial(ow.reject, thread_id, step, reason=reason)
        )
        _answer(ow, thread_id, call, **how)


@commands.command()
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
    with errors(as_json), open_store(db, tools) as ow:
        _answer(ow, thread_id, partial(ow.respond, thread_id, text, step), **how)


@commands.command()
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
    with errors(as_json), open_store(db, None) as ow:
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
        say(view_json(view))
    else:
        print_view(view)
        err.print(f"decided; continue with `onward resume {thread_id}`", highlight=False)


@commands.command()
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
    with errors(as_json), open_store(db, tools) as ow:
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
    failed = [
        {"thread_id": x.thread_id, "step_id": x.step_id, "error": e} for x, e in report.errors
    ]
    if as_json:
        say(json.dumps({"now": report.now.isoformat(), **found, "errors": failed}, indent=2))
        return
    for e in failed:
        err.print(
            f"not applied (next sweep retries): {e['thread_id']}: {e['error']}", highlight=False
        )
    for what, xs in found.items():
        for x in xs:
            out.print(f"{what}: {x['thread_id']} {x['step_id'] or 'plan'}", highlight=False)
    if not any(found.values()):
        out.print("no deadline reached")
