"""Crons run by ``onward serve`` (LangGraph Server's ``/runs/crons``): a run request
started on a schedule (five-field cron syntax, parsed by ``croniter``; in ``timezone``, UTC
by default), on the cron's thread or, for a stateless cron, on a new thread each time
(deleted after the run unless ``on_run_completed="keep"``).

The server's :class:`Scheduler` looks for due crons every ``ONWARD_CRON_TICK`` (5 s) and
starts each one's run as its owner, through the same path as a client's run request
(limits per user included: a firing the owner has no room for is skipped, as a busy
thread's is with ``multitask_strategy="reject"``). ``onward worker`` does not fire crons;
several servers on one database may (each firing is claimed by one, in the store). The
clock is injectable, so a test moves time on instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter  # type: ignore[import-untyped]

from onward.errors import DatabaseUnavailable, RequestLimitError, UsageError, refuse_unknown
from onward.model.clock import utcnow
from onward.serve.context import Serving
from onward.serve.drives import launch, modes_of
from onward.serve.requests import (
    UNSUPPORTED_DEFAULTS,
    a_string,
    an_object,
    check_run_fields,
    check_start_input,
    pause_after,
    pause_before,
    tightened_budget,
    tightened_policy,
)
from onward.settings import settings
from onward.store.crons import CronRow

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
RUN_FIELDS = (
    *("assistant_id", "input", "metadata", "config", "context", "checkpoint_during"),
    *("interrupt_before", "interrupt_after", "webhook", "multitask_strategy", "stream_mode"),
    *UNSUPPORTED_DEFAULTS.keys(),
    "stream_resumable",
)
"""A cron's run-request fields (what each firing sends as a run request)."""
CRON_FIELDS = ("schedule", "end_time", "enabled", "timezone", "on_run_completed")
MAX_CRONS = 100
"""Most crons one user keeps."""


def parse_schedule(text: Any) -> str:
    """Five cron fields (minute hour day month weekday): at most one run a minute."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError("schedule must be a cron expression such as '*/5 * * * *'")
    fields = text.split()
    if len(fields) != 5 or not croniter.is_valid(text):
        raise UsageError(
            f"schedule {text[:60]!r} is not a five-field cron expression (minute hour day "
            "month weekday), e.g. '0 9 * * 1-5'"
        )
    return " ".join(fields)


def parse_timezone(name: Any) -> str | None:
    if name is None:
        return None
    if not isinstance(name, str) or len(name) > 64:
        raise UsageError("timezone must be an IANA name such as 'Europe/Paris'")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise UsageError(f"timezone {name[:64]!r} is not a known IANA time zone") from None
    return name


def parse_end(text: Any) -> datetime | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise UsageError("end_time must be an ISO 8601 date and time")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"end_time {text[:40]!r} is not an ISO 8601 date and time") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def next_run(schedule: str, timezone: str | None, after: datetime) -> datetime:
    """The schedule's first time after ``after``, in UTC."""
    zone = ZoneInfo(timezone) if timezone else UTC
    found: datetime = croniter(schedule, after.astimezone(zone)).get_next(datetime)
    return found.astimezone(UTC)


def upcoming(row: CronRow, after: datetime) -> datetime | None:
    """The next run past ``after``, or None once past the cron's end."""
    when = next_run(row.schedule, row.timezone, after)
    return None if row.end_time is not None and when > row.end_time else when


def check_payload(ctx: Serving, payload: dict[str, Any], who: str) -> str:
    """A cron's run request, checked as a run request is (fields, modes, pauses, webhook,
    assistant): a cron that could never start is refused now, not at its first firing.
    Its resolved assistant id."""
    check_run_fields(payload)
    modes_of(payload)
    pause_before(payload), pause_after(payload)
    an_object(payload, "metadata")
    with ctx.clients.use() as ow:
        assistant = ctx.catalog.resolve(
            ow.store, a_string(payload, "assistant_id"), who, bool(ctx.tokens)
        )
    given = payload.get("input")
    if isinstance(given, dict):  # a cron cannot loosen the rules a client's run follows
        check_start_input(given)
        tightened_policy(assistant.policy, given.get("policy"))
        tightened_budget(assistant.budget, given.get("budget"))
    return assistant.assistant_id


def new_cron(
    ctx: Serving, body: Mapping[str, Any], who: str, thread_id: str | None, now: datetime
) -> CronRow:
    refuse_unknown(body, (*RUN_FIELDS, *CRON_FIELDS), "cron")
    if thread_id is not None and body.get("on_run_completed") is not None:
        raise UsageError("on_run_completed is for stateless crons: a thread cron keeps its thread")
    completed = a_string(body, "on_run_completed", ("delete", "keep"))
    enabled = body.get("enabled", True)
    if not isinstance(enabled, bool):
        raise UsageError("enabled must be true or false")
    payload = {k: v for k, v in body.items() if k in RUN_FIELDS}
    assistant_id = check_payload(ctx, payload, who)
    row = CronRow(
        cron_id=str(uuid.uuid4()),
        owner=who,
        thread_id=thread_id,
        assistant_id=assistant_id,
        schedule=parse_schedule(body.get("schedule")),
        timezone=parse_timezone(body.get("timezone")),
        payload=payload,
        metadata=an_object(body, "metadata"),
        on_run_completed=None if thread_id else completed or "delete",
        enabled=enabled,
        end_time=parse_end(body.get("end_time")),
        next_run_date=None,
        created_at=now,
        updated_at=now,
    )
    return replace(row, next_run_date=upcoming(row, now))


def updated_cron(ctx: Serving, row: CronRow, body: Mapping[str, Any], now: datetime) -> CronRow:
    """``row`` with a PATCH applied: cron fields replaced, run-request fields merged into
    its request (checked again); the next run follows the schedule from ``now``."""
    if not body:
        raise UsageError("a cron update needs at least one field to change")
    refuse_unknown(body, (*RUN_FIELDS, *CRON_FIELDS), "cron update")
    if row.thread_id is not None and body.get("on_run_completed") is not None:
        raise UsageError("on_run_completed is for stateless crons: a thread cron keeps its thread")
    changes: dict[str, Any] = {"updated_at": now}
    if body.get("schedule") is not None:
        changes["schedule"] = parse_schedule(body["schedule"])
    if "timezone" in body:
        changes["timezone"] = parse_timezone(body["timezone"])
    if "end_time" in body:  # an explicit null clears it
        changes["end_time"] = parse_end(body["end_time"])
    if body.get("enabled") is not None:
        if not isinstance(body["enabled"], bool):
            raise UsageError("enabled must be true or false")
        changes["enabled"] = body["enabled"]
    if body.get("on_run_completed") is not None:
        changes["on_run_completed"] = a_string(body, "on_run_completed", ("delete", "keep"))
    if body.get("metadata") is not None:
        changes["metadata"] = an_object(body, "metadata")
    payload = {**row.payload, **{k: v for k, v in body.items() if k in RUN_FIELDS}}
    changes["assistant_id"] = check_payload(ctx, payload, row.owner)
    changes["payload"] = payload
    new = replace(row, **changes)
    return replace(new, next_run_date=upcoming(new, now))


def cron_doc(row: CronRow) -> dict[str, Any]:
    """A cron as LangGraph Server shows it."""
    return {
        "cron_id": row.cron_id,
        "assistant_id": row.assistant_id,
        "thread_id": row.thread_id,
        "on_run_completed": row.on_run_completed,
        "end_time": row.end_time.isoformat() if row.end_time else None,
        "schedule": row.schedule,
        "timezone": row.timezone,
        "created_at": row.created_at.isoformat(),
        "updated_at": row.updated_at.isoformat(),
        "payload": row.payload,
        "user_id": row.owner,
        "next_run_date": row.next_run_date.isoformat() if row.next_run_date else None,
        "metadata": row.metadata,
        "enabled": row.enabled,
    }


class Scheduler:
    """Starts due crons' runs: :meth:`tick` once, or every ``ONWARD_CRON_TICK`` while the
    server runs (:meth:`start` / :meth:`stop`). ``clock``: what time it is (a test's
    fake clock moves on at once)."""

    def __init__(self, ctx: Serving, clock: Clock | None = None) -> None:
        self.ctx = ctx
        self.clock = clock or utcnow
        self.interval = settings().cron_tick.total_seconds()
        self._task: asyncio.Task[None] | None = None
        self.fired = 0
        """Runs started."""
        self.ticks = 0
        """Looks at the due crons so far."""

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except DatabaseUnavailable:  # the store logs one line per outage: next tick
                pass
            except Exception:  # a failing tick (a locked store) must not end the loop
                log.exception("cron scheduler")
            await asyncio.sleep(self.interval)

    async def tick(self) -> int:
        """Start every due cron's run (once per firing, however late); how many started."""
        from starlette.concurrency import run_in_threadpool

        now = self.clock()
        started = 0
        for row in await run_in_threadpool(self._claim_due, now):
            if await self._fire(row):
                started += 1
        self.fired += started
        self.ticks += 1
        return started

    def _claim_due(self, now: datetime) -> list[CronRow]:
        """The due crons this server claimed (their next run moved on past ``now``)."""
        claimed = []
        with self.ctx.clients.use() as ow:
            for row in ow.store.crons.due(now):
                assert row.next_run_date is not None
                if ow.store.crons.claim(row.cron_id, row.next_run_date, upcoming(row, now)):
                    claimed.append(row)  # else another server fired it
        return claimed

    async def _fire(self, row: CronRow) -> bool:
        from starlette.concurrency import run_in_threadpool

        from onward.serve.routes.stateless import clean_up_later, start_stateless

        metadata = {**row.metadata, **an_object(row.payload, "metadata"), "cron_id": row.cron_id}
        payload = {**row.payload, "metadata": metadata}
        try:
            if row.thread_id is not None:
                await run_in_threadpool(
                    launch, self.ctx, row.thread_id, payload, row.owner, modes_of(payload)
                )
                return True
            body = {**payload, "on_completion": row.on_run_completed or "delete"}
            thread_id, run_id, feed, keep = await run_in_threadpool(
                start_stateless, self.ctx, body, row.owner
            )
            clean_up_later(self.ctx, thread_id, run_id, feed, row.owner, keep)
            return True
        except RequestLimitError as exc:
            log.warning("cron %s skipped this time: %s", row.cron_id, exc)
        except Exception as exc:  # the cron stays; this firing says why in the log
            detail = getattr(exc, "detail", None) or exc
            log.warning("cron %s could not start its run: %s", row.cron_id, detail)
        return False
