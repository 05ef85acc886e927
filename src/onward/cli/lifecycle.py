"""Changing a run's life: cancel it (with compensation), fork it from a past state, prune
finished runs from the store."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from onward.cli.options import (
    EXIT_DONE,
    EXIT_FAILED,
    DbOpt,
    JsonOpt,
    ToolsOpt,
    UserOpt,
    edits,
    errors,
    open_store,
    store_url,
)
from onward.cli.render import dump, err, out, print_plain, print_view, say, view_json
from onward.cli.running import drive, finish

commands = typer.Typer()


@commands.command()
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
    with errors(as_json), open_store(db, tools) as ow:
        report = ow.cancel(thread_id, compensate=compensate, reason=reason, by=user)
    comps = [
        {"step_id": c.step_id, "tool": c.tool, "key": c.effect_key, "status": c.status.value}
        | ({"error": c.error} if c.error else {})
        for c in report.compensations
    ]
    if as_json:
        data = json.loads(view_json(report.view))
        dump(data | {"compensations": comps})
    else:
        print_view(report.view)
        for c in comps:
            out.print(
                f"compensation {c['status']}: {c['step_id']} ({c['tool']})"
                + (f" — {c['error']}" if "error" in c else ""),
                highlight=False,
            )
    raise typer.Exit(EXIT_DONE if report.complete else EXIT_FAILED)


@commands.command()
def fork(
    thread_id: str,
    at: Annotated[str, typer.Option("--at", help="The checkpoint to continue from.")],
    edit: Annotated[
        list[str] | None,
        typer.Option("--edit", help="Change a step's arg: STEP.ARG=VALUE (repeatable)."),
    ] = None,
    no_continue: Annotated[
        bool,
        typer.Option(
            "--no-continue", help="Only create the new run; `onward resume NEW` drives it later."
        ),
    ] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    tools: ToolsOpt = None,
) -> None:
    """Continue a run from a past state as a new run (the original stays intact)."""
    with errors(as_json), open_store(db, tools) as ow:
        changes, _ = edits(edit, None)
        new_id = ow.fork(thread_id, at, changes)
        if not as_json:
            print_plain(f"forked as {new_id}", err)
        view = ow.get(new_id) if no_continue else drive(ow, new_id, as_json)
    finish(view, as_json)


def make_room(db: str | None) -> None:
    """Spend a SQLite store's reserve before the store is opened: on a volume with no byte
    free even opening it fails (its ``-shm`` file cannot be made). ``prune`` makes the
    reserve again at its end if there is room (store/reserve.py)."""
    from onward.store import reserve
    from onward.store.sql import Backend, backend_of, sqlite_path

    url = store_url(db)
    if backend_of(url) is Backend.SQLITE:
        reserve.spend(sqlite_path(url).expanduser().absolute())


@commands.command()
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
    from onward.policies.durations import parse_duration

    with errors(as_json):
        if not dry_run:
            make_room(db)
    with errors(as_json), open_store(db, None) as ow:
        report = ow.prune(parse_duration(older_than), keep_last=keep_last, dry_run=dry_run)
    if as_json:
        say(report.model_dump_json(indent=2))
        return
    freed = "" if dry_run else f" ({report.rows} rows, {report.artifact_bytes} artifact bytes)"
    out.print(
        f"{'would remove' if dry_run else 'removed'} {len(report.removed)} finished runs"
        f"{freed}; kept {report.kept} finished, {report.skipped} not finished",
        highlight=False,
    )
    if not dry_run:
        kept = "" if report.vacuumed or not report.removed else " (no room to VACUUM yet)"
        out.print(
            f"database: {report.db_bytes_before} → {report.db_bytes_after} bytes{kept}",
            highlight=False,
        )
