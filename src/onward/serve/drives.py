"""Driving a thread's runs on the server's pool, their output fed to whoever streams them.

A drive holds the run's lease, as a CLI drive does, on a pool thread with its own
client; a client that disconnects does not stop it (unless it asked to:
``on_disconnect="cancel"``). One run drives a thread at a time; a run request on a busy
thread follows its ``multitask_strategy`` as on LangGraph Server: ``enqueue`` (the
default: it starts when the runs before it are done, in the order they came), ``reject``
(409), ``interrupt`` or ``rollback`` (the running run is cancelled that way first).
:class:`~onward.serve.recovery.Recovery` uses the same :func:`run` to finish runs whose
driver died, and starts queued runs a stopped server left behind.

A drive that lost the database (Postgres stopped, restarted, its connection killed) is
driven again in the same process from its last saved step once the server answers, with
backoff and jitter (the store says so in one log line per outage); its stream goes on and
its record follows. A database gone longer than ``ONWARD_PG_OUTAGE`` ends the stream with
an ``error`` event naming the ``Last-Event-ID`` to join again with; the record stays
``running`` and recovery drives the run once the server is back.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from fastapi import HTTPException
from langgraph.types import Command, StreamMode

from onward.checkpointing.values import CheckpointValues
from onward.client import Onward, stopping
from onward.errors import (
    DatabaseGone,
    DatabaseUnavailable,
    LeaseLostError,
    OnwardError,
    RequestLimitError,
    StoreError,
    UsageError,
)
from onward.observe.chat import STEP_MESSAGE_PREFIX, conversation_parts, step_pair
from onward.serve import states
from onward.serve.assistants import Assistant
from onward.serve.clients import Clients
from onward.serve.context import Serving
from onward.serve.control import Active, CancelAction, Control
from onward.serve.encoded import kept_by
from onward.serve.feed import DONE, Feed
from onward.serve.intake import ENDED, prepare
from onward.serve.replay import UNFINISHED
from onward.serve.requests import (
    a_string,
    check_run_fields,
    multitask_of,
    pause_after,
    pause_before,
    run_metadata,
    webhook_of,
)
from onward.serve.states import StateAt
from onward.serve.views import Known, check_visible, driven, read_thread
from onward.serve.wire import chat_values, chunk, jsonable, run_state
from onward.store.drivers import DriverId, gone_here, new_driver_id
from onward.store.runs import ApiRunRow, ApiRunStatus
from onward.store.sql import Statement

GRAPH_MODES: dict[str, StreamMode] = {
    "values": "values",
    "updates": "updates",
    "messages-tuple": "messages",
    "custom": "custom",
    "debug": "debug",
    "tasks": "tasks",
    "checkpoints": "checkpoints",
}
"""API stream modes → the graph's (``messages-tuple`` is the graph's ``messages``)."""
MAX_QUEUED = 16
"""Runs that may wait behind one busy thread (429 past it)."""
STOP_WAIT = 60.0
"""Longest a request waits for a run it interrupts to stop (seconds)."""
POLL = 0.1
"""Seconds between looks at a thread another process was asked to stop."""
ELSEWHERE_POLL = 0.25
"""Seconds between looks at a thread another process drives, for the runs queued here."""
QUEUED_STALE = 10.0
"""Seconds a thread is free after which any process starts a run another process queued
(its process looks every :data:`ELSEWHERE_POLL`: it is gone)."""
KEPT_WAIT = 60.0
"""Longest a drive's end waits for its feed to keep what it fed (seconds)."""
BACKOFF_FIRST, BACKOFF_MAX = 0.1, 2.0
"""Seconds before a drive that lost the database goes again: doubling, ±50% jitter."""


def modes_of(body: dict[str, Any]) -> list[str]:
    raw = body.get("stream_mode") or "values"
    modes = [raw] if isinstance(raw, str) else raw
    if not isinstance(modes, list) or not all(isinstance(m, str) for m in modes):
        raise UsageError("stream_mode must be a mode name or a list of them")
    unknown = sorted(set(modes) - set(GRAPH_MODES))
    if "events" in unknown:
        raise UsageError(
            "stream_mode events is not supported by onward serve: onward drives a run with "
            "the graph's synchronous stream on a worker thread (under its lease, cancellable "
            "between nodes), not with LangChain's astream_events, and its tools are not "
            "LangChain tools, so there are no on_tool_* events to send. Use messages-tuple "
            "(model tokens, each step's tool call and result) and custom (progress); see "
            "docs/serving.md"
        )
    if unknown:
        raise UsageError(
            f"stream_mode {', '.join(unknown)} is not supported; use {', '.join(GRAPH_MODES)}"
        )
    return modes


@contextmanager
def deciding(ctx: Serving, thread_id: str) -> Iterator[None]:
    """Held while a request decides what to do with a thread (start, queue or replace its
    run): this process's lock of the thread, then the store's, which keeps requests that
    reached other server processes (``--processes``, or servers sharing the store) off it
    too."""
    store = ctx.clients.shared("locks").store
    with ctx.control.thread_lock(thread_id), store.thread_locks(thread_id):
        yield


def launch(
    ctx: Serving, thread_id: str, body: dict[str, Any], who: str, modes: list[str], loop: Any = None
) -> tuple[str, Feed]:
    """Accept a run request: drive it on the pool, or queue it behind the thread's run;
    (run id, its feed). ``loop`` is unused (a feed is read on any loop)."""
    check_run_fields(body)
    pause_before(body), pause_after(body)  # a typo is a 422 before anything is queued
    strategy = multitask_of(body)
    with ctx.clients.use() as ow:
        assistant = ctx.catalog.resolve(
            ow.store, a_string(body, "assistant_id"), who, bool(ctx.tokens)
        )
    with deciding(ctx, thread_id):
        with ctx.clients.use() as ow:
            known = read_thread(ow, thread_id)
            exists = known.row is not None or known.has_run
            if exists:
                check_visible(thread_id, known, who, ctx.tokens)  # another user's: 404
            busy = exists and (
                bool(ctx.control.on_thread(thread_id))
                # queued, or started by another process (its drive not yet leased)
                or bool(ow.store.threads.count_runs(thread_id, *UNFINISHED))
                or driven(ow, thread_id, has_run=known.has_run)
            )
        if not busy:  # what was read holds: the lock keeps other requests off the thread
            return stage(ctx, thread_id, body, who, modes, assistant, known=known).go()
        if strategy == "reject":
            raise HTTPException(
                409,
                f"thread {thread_id} has a run in progress; wait for it, or send "
                "multitask_strategy enqueue (the default), interrupt or rollback",
            )
        if strategy == "enqueue":
            return _enqueue(ctx, thread_id, body, who, modes, assistant.assistant_id)
        stop_thread(ctx, thread_id, CancelAction(strategy))
        return stage(ctx, thread_id, body, who, modes, assistant).go()


def _enqueue(
    ctx: Serving, thread_id: str, body: dict[str, Any], who: str, modes: list[str], aid: str
) -> tuple[str, Feed]:
    with ctx.clients.use() as ow:
        if ow.store.threads.count_runs(thread_id, ApiRunStatus.PENDING) >= MAX_QUEUED:
            raise RequestLimitError(
                f"thread {thread_id} already has {MAX_QUEUED} runs waiting, the most onward "
                "queues on one thread; wait for them",
                http_status=429,
                retry_after=ctx.pool.limits.retry_after,
            )
        run_id = str(uuid.uuid4())
        metadata = run_metadata(body)
        active = ctx.control.open(run_id, thread_id, queued=True)
        by = new_driver_id()  # this process: it drives the run (its feed is the stream's)
        ow.store.threads.add_run(
            run_id,
            thread_id,
            aid,
            metadata or {},
            status=ApiRunStatus.PENDING,
            request={"body": body, "who": who, "modes": modes, "by": by},
            multitask_strategy="enqueue",
        )
    if not any(not a.queued for a in ctx.control.on_thread(thread_id)):
        _wait_for_thread(ctx, thread_id)  # another process drives the thread now
    return run_id, active.feed


def _wait_for_thread(ctx: Serving, thread_id: str) -> None:
    """Start this process's runs queued on ``thread_id`` once the run another process
    drives on it has ended (looked for every :data:`ELSEWHERE_POLL` seconds, from a
    thread of its own; one per thread). The process that queued a run drives it: the
    client's stream reads this process's feed of it."""
    with _WAITING_LOCK:
        if thread_id in _WAITING:
            return
        _WAITING.add(thread_id)

    def wait() -> None:
        try:
            while not ctx.control.stopping and any(
                a.queued for a in ctx.control.on_thread(thread_id)
            ):
                time.sleep(ELSEWHERE_POLL)
                with ctx.clients.use() as ow:
                    if _driven_elsewhere(ow, thread_id):
                        continue  # read without the thread's locks; dispatch reads again
                dispatch(ctx, thread_id)
        finally:
            with _WAITING_LOCK:
                _WAITING.discard(thread_id)

    threading.Thread(target=wait, name="onward-queued", daemon=True).start()


_WAITING: set[str] = set()
"""Threads whose runs queued here wait for another process's run (:func:`_wait_for_thread`)."""
_WAITING_LOCK = threading.Lock()


def _ours_to_start(row: ApiRunRow, free: timedelta) -> bool:
    """Whether this process may start a queued run: one it queued, one whose queuing
    process has exited (on this host), or one still queued :data:`QUEUED_STALE` seconds
    after its thread became free (``free`` ago: its process, on another host, is gone);
    not one that a live process will start itself once it sees the thread free."""
    by = (row.request or {}).get("by")
    if not isinstance(by, str):
        return True  # queued before the queuing process was recorded
    found = DriverId.parse(by)
    if found is None or (found.host == socket.gethostname() and found.pid == os.getpid()):
        return True
    if gone_here(by) is not None:
        return True
    return free.total_seconds() > QUEUED_STALE


@dataclass
class Staged:
    """A run prepared (counted for its user, its thread and records stored) but not yet
    driven: :meth:`go` drives it; :meth:`release` gives its place back (the caller
    removes its thread), so a batch of runs starts whole or not at all."""

    ctx: Serving
    thread_id: str
    run_id: str
    who: str
    body: dict[str, Any]
    modes: list[str]
    command: Command[Any] | None
    checkpoint_id: str | None
    clients: Clients

    def go(self) -> tuple[str, Feed]:
        ctx, body = self.ctx, self.body
        active = ctx.control.get(self.run_id) or ctx.control.open(self.run_id, self.thread_id)
        active.queued = False
        pause, after, hook = pause_before(body), pause_after(body), webhook_of(body)
        ctx.pool.submit(
            self.who,
            lambda: run(
                ctx,
                self.clients,
                active,
                self.command,
                self.modes,
                self.checkpoint_id,
                pause_at=pause,
                pause_after=after,
                webhook=hook,
            ),
        )
        return self.run_id, active.feed

    def release(self) -> None:
        self.ctx.pool.release(self.who)


def stage(
    ctx: Serving,
    thread_id: str,
    body: dict[str, Any],
    who: str,
    modes: list[str],
    aid: str | Assistant,
    *,
    run_id: str | None = None,
    force: bool = False,
    known: Known | None = None,
) -> Staged:
    """Count the run for its user (429 past the cap, before anything is stored), check
    and store it (:func:`~onward.serve.intake.prepare`): a run ready to :meth:`~Staged.go`
    (the thread is free). ``aid``: the assistant's id, or the assistant the caller
    resolved; ``run_id``: a queued run's; ``force``: past the user's cap (a queued run's
    turn has come); ``known``: the thread as the caller read it."""
    run_id = run_id or str(uuid.uuid4())
    ctx.pool.reserve(who, force=force)
    try:
        if isinstance(aid, Assistant):
            assistant = aid
        else:
            with ctx.clients.use() as ow:
                assistant = ctx.catalog.resolve(ow.store, aid, who, False)
        own = ctx.catalog.own_clients(assistant)  # its models, its MCP servers' tools
        actx = replace(ctx, policy=assistant.policy, budget=assistant.budget)
        actx = replace(actx, clients=own) if own is not None else actx
        _id, command, checkpoint_id = prepare(
            actx,
            thread_id,
            body,
            who,
            run_id=run_id,
            assistant_id=assistant.assistant_id,
            known=known,
            modes=modes,
        )
    except BaseException:
        ctx.pool.release(who)
        raise
    clients = own or (ctx.clients if assistant.model_plans else ctx.plain_clients)
    return Staged(ctx, thread_id, run_id, who, body, modes, command, checkpoint_id, clients)


def stage_new(
    ctx: Serving, thread_id: str, body: dict[str, Any], who: str, modes: list[str]
) -> Staged:
    """:func:`stage` a run on a thread made for it (a stateless run of a batch)."""
    check_run_fields(body)
    pause_before(body), pause_after(body)
    with ctx.clients.use() as ow:
        assistant = ctx.catalog.resolve(
            ow.store, a_string(body, "assistant_id"), who, bool(ctx.tokens)
        )
    return stage(ctx, thread_id, body, who, modes, assistant)


def run(
    ctx: Serving,
    clients: Clients,
    active: Active,
    command: Command[Any] | None,
    modes: list[str],
    checkpoint_id: str | None,
    *,
    takeover: bool = False,
    pause_at: Sequence[str] = (),
    pause_after: Sequence[str] = (),
    webhook: str | None = None,
) -> None:
    """Drive a run (on a pool thread), then start the next run queued on its thread;
    ``webhook``: where to POST the run's record once it ended."""
    try:
        drive(
            clients,
            active.thread_id,
            active.run_id,
            command,
            modes,
            checkpoint_id,
            active.feed,
            takeover=takeover,
            pause_at=pause_at,
            pause_after=pause_after,
            control=ctx.control,
        )
    finally:
        if webhook:
            notify(ctx, active.run_id, active.feed, webhook)
        dispatch(ctx, active.thread_id)


def notify(ctx: Serving, run_id: str, feed: Feed, url: str) -> None:
    """POST the ended run (its record and last values, as LangGraph Server's webhooks do)
    through the egress policy; a failed delivery is logged as the run's event, not retried."""
    from onward.observe.kinds import EventKind
    from onward.policies.egress import request

    feed.wait_done(10.0)  # what the drive fed is readable (its writer kept it)
    with ctx.clients.use() as ow:
        row = ow.store.threads.get_run(run_id)
    values = [data for _n, (event, data) in feed.items() if event == "values"][-1:]
    errors = [data for _n, (event, data) in feed.items() if event == "error"]
    values = [
        states.plain(found)
        for v in values
        if (found := states.resolve(ctx.clients, v)) is not states.MISSING
    ]
    if not values and row is not None:  # it streamed no values (or was recovered so)
        with ctx.clients.use() as ow, contextlib.suppress(Exception):
            snap = ow.graph.get_state(ow._config(row.thread_id))
            values = [chat_values(snap.values)] if snap.values else []
    doc: dict[str, Any] = {
        "run_id": run_id,
        "thread_id": row.thread_id if row else None,
        "assistant_id": row.assistant_id if row else None,
        "status": row.status.value if row else "rolled back",
        "metadata": row.metadata if row else {},
        "values": values[-1] if values else None,
        "error": errors[-1] if errors else None,
    }
    data = json.dumps(doc).encode()
    if ctx.redact is not None:  # a token holder chose the URL
        data = ctx.redact(data)
    try:
        answer = request(
            "POST",
            url,
            data=data,
            headers={"Content-Type": "application/json"},
            timeout=10,
            max_bytes=64 * 1024,
        )
        outcome = {"webhook": url, "status": answer.status}
    except Exception as exc:  # the run is over either way: say what happened
        outcome = {"webhook": url, "error": f"{type(exc).__name__}: {exc}"[:300]}
    if row is not None:
        with ctx.clients.use() as ow, contextlib.suppress(Exception):
            ow.store.events.record(row.thread_id, EventKind.WEBHOOK_SENT, outcome)


def dispatch(ctx: Serving, thread_id: str) -> None:
    """Start the oldest run queued on the thread, if the thread is free."""
    if ctx.control.stopping:
        return
    with ctx.control.thread_lock(thread_id):
        if any(not a.queued for a in ctx.control.on_thread(thread_id)):
            return
        with ctx.clients.use() as ow:
            if not ow.store.threads.queued(thread_id):  # mostly none: one read, done
                return
        with ctx.clients.shared("locks").store.thread_locks(thread_id):
            _start_oldest(ctx, thread_id)


def _driven_elsewhere(ow: Onward, thread_id: str) -> bool:
    """Whether another process drives the thread: its lease is live, or an API run on
    it is running (started there, its drive not yet holding the lease)."""
    return ow.store.leases.live(thread_id) or bool(
        ow.store.threads.count_runs(thread_id, ApiRunStatus.RUNNING)
    )


def _start_oldest(ctx: Serving, thread_id: str) -> None:
    """:func:`dispatch` under the thread's locks, something queued on it."""
    with ctx.clients.use() as ow:
        queued = ow.store.threads.queued(thread_id)  # read again under the store's lock
        if not queued:
            return
        if _driven_elsewhere(ow, thread_id):
            return  # a later sweep tries again
        run = ow.store.get_run(thread_id)
        # How long the thread has been free: since its run's last status write.
        free = ow.store.leases.clock() - run.updated_at if run else timedelta(0)
    for row in queued:
        if not _ours_to_start(row, free):
            return  # the oldest is another process's: it starts it (its client is there)
        req = row.request or {}
        try:
            body, who, modes = req["body"], req["who"], req["modes"]
            aid, run_id = row.assistant_id, row.run_id
            stage(ctx, thread_id, body, who, modes, aid, run_id=run_id, force=True).go()
            return
        except Exception as exc:  # this one cannot start: say why on its stream
            message = exc.detail if isinstance(exc, HTTPException) else str(exc)
            with ctx.clients.use() as ow:
                ow.store.threads.set_run_status(row.run_id, ApiRunStatus.ERROR)
            feed = ctx.control.feed(row.run_id)
            if feed is not None:
                feed.put(("error", {"error": type(exc).__name__, "message": str(message)}))
                feed.put(DONE)
            ctx.control.close(row.run_id)


def stop_thread(ctx: Serving, thread_id: str, action: CancelAction) -> None:
    """Cancel every run the thread has in hand (multitask ``interrupt`` / ``rollback``)
    and wait until its drive has stopped; a run another process drives is asked through
    the store (409 when it does not stop in time, or the driver is no API run)."""
    with ctx.clients.use() as ow:
        for row in ow.store.threads.queued(thread_id):
            cancel_queued(ctx, row.run_id, action)
    waiting = [ctx.control.cancel(a.run_id, action) for a in ctx.control.on_thread(thread_id)]
    for active in waiting:
        if active is not None and not active.stopped.wait(STOP_WAIT):
            raise HTTPException(409, f"the run on thread {thread_id} did not stop in time")
    with ctx.clients.use() as ow:
        if not driven(ow, thread_id):
            return
        running = ow.store.threads.runs(thread_id)
        asked = [r.run_id for r in running if ow.store.threads.request_cancel(r.run_id, action)]
    deadline = time.monotonic() + STOP_WAIT
    while asked and time.monotonic() < deadline:
        with ctx.clients.use() as ow:
            if not driven(ow, thread_id):
                return
        time.sleep(POLL)
    raise HTTPException(
        409,
        f"thread {thread_id} is driven by another process that did not stop in time (or "
        "by a run not started through this API: cancel it there with onward cancel)",
    )


def cancel_queued(ctx: Serving, run_id: str, action: CancelAction) -> None:
    """A queued run is cancelled before it started: interrupted, or (rollback) removed."""
    with ctx.clients.use() as ow:
        if action is CancelAction.ROLLBACK:
            ow.store.threads.delete_run(run_id)
        else:
            ow.store.threads.set_run_status(run_id, ApiRunStatus.INTERRUPTED)
    feed = ctx.control.feed(run_id)
    if feed is not None:
        feed.put(DONE)
    ctx.control.close(run_id)


class StepMessages:
    """The ``messages`` mode's share of the conversation model: each step's tool call and
    result as soon as a values chunk shows it settled (the graph streams the messages its
    nodes write; the step messages are derived, onward.observe.chat). The first chunk
    only records what the thread already showed. Only the new messages become JSON.

    A settled step's messages are made again only when its record changed since they
    were last made (their ids depend on the step and its record alone): the whole
    conversation made per superstep (up to 200 tool-call pairs a goal) cost a
    ``messages-tuple`` stream a few milliseconds a superstep."""

    def __init__(self) -> None:
        self.seen: set[str] | None = None
        self._made: dict[str, Any] = {}
        """Step id → the record its messages were last made from."""

    def take(self, out: Feed, values: Any) -> None:
        state = run_state(values) if values else None
        messages = self._messages(state) if state is not None else []
        if self.seen is None:
            self.seen = {m.id for m in messages if m.id}
            return
        for m in messages:
            if m.id and m.id not in self.seen and m.id.startswith(STEP_MESSAGE_PREFIX):
                self.seen.add(m.id)
                out.put(("messages", [jsonable(m), {"langgraph_node": "verify"}]))

    def _messages(self, state: Any) -> list[Any]:
        """:func:`~onward.observe.chat.conversation`, without the messages of steps whose
        record is the one they were made from (their ids are all seen already)."""
        index = state.plan.index()
        out: list[Any] = []
        for part in conversation_parts(state):
            if not isinstance(part, str):
                out.append(part)
                continue
            record = state.record(part)
            if self._made.get(part) == record:
                continue
            self._made[part] = record
            out.extend(step_pair(state, index, part))
        return out


class Pairing:
    """A drive's graph chunks onto its feed, each values chunk as a
    :class:`~onward.serve.states.StateAt` named by the checkpoint that saved it.

    LangGraph emits a superstep's values, saves its checkpoint, then (with the
    ``checkpoints`` mode) names that checkpoint before anything else of the next
    superstep: so a values chunk is held until that name comes, and is put without
    one (kept whole) if anything else comes first. An interrupt's values chunk (the
    state plus ``__interrupt__``) is put at once."""

    def __init__(
        self,
        out: Feed,
        thread_id: str,
        wanted: set[StreamMode],
        kept: CheckpointValues | None = None,
    ) -> None:
        self.out, self.thread_id, self.wanted = out, thread_id, wanted
        self.kept = kept
        """The store's kept values, seeded with each checkpoint's state as it is named."""
        self.held: StateAt | None = None
        self.last: Any = None
        self.messages = StepMessages()
        self.supersteps = 0
        """Values chunks taken: each follows a superstep the graph saved."""

    def graph_modes(self, modes: list[StreamMode]) -> list[StreamMode]:
        """The graph's modes: with ``checkpoints`` when values are streamed."""
        return sorted({*modes, "checkpoints"}) if "values" in self.wanted else modes

    def take(self, mode: str, data: Any) -> None:
        if mode == "checkpoints" and self.held is not None:
            self.held.checkpoint_id = (
                (data.get("config") or {}).get("configurable", {}).get("checkpoint_id")
            )
            if self.kept is not None and self.held.checkpoint_id:
                self.kept.seed(self.thread_id, self.held.checkpoint_id, self.held.raw)
        self.flush()
        if mode == "values":
            self.last = data
            self.supersteps += 1
            if "messages" in self.wanted:
                self.messages.take(self.out, data)
            if "values" in self.wanted:
                self.held = StateAt(self.thread_id, data)
                if isinstance(data, dict) and "__interrupt__" in data:
                    self.flush()
        elif mode in self.wanted:
            self.out.put(chunk(mode, data))

    def flush(self) -> None:
        """Put the held values chunk (with its checkpoint, if it came)."""
        if self.held is not None:
            self.out.put(("values", self.held))
            self.held = None


def drive(
    clients: Clients,
    thread_id: str,
    run_id: str,
    command: Command[Any] | None,
    modes: list[str],
    checkpoint_id: str | None,
    out: Feed,
    takeover: bool = False,
    pause_at: Sequence[str] = (),
    pause_after: Sequence[str] = (),
    control: Control | None = None,
) -> None:
    """Drive a run for a request, feeding ``out``; ``pause_at`` / ``pause_after``: the
    request's ``interrupt_before`` / ``interrupt_after`` (the run ends *success* there and
    its thread is *interrupted*, as on LangGraph Server; a run ends *interrupted* only when
    cancelled). A cancel (``control``) stops it before its next node."""
    graph_modes: list[StreamMode] = sorted(
        {GRAPH_MODES[m] for m in modes if m in GRAPH_MODES} | {"values"}
    )
    wanted = {GRAPH_MODES[m] for m in modes if m in GRAPH_MODES}
    status: ApiRunStatus | None = ApiRunStatus.SUCCESS
    reachable = True
    woken = False  # the run's queue entry (if any) is claimable again, with its record
    with clients.use() as ow:
        if command is ENDED:  # ended by the request itself ("Mark as Resolved")
            try:
                if "values" in wanted:  # kept as its checkpoint's reference (states.py)
                    snap = ow.graph.get_state(ow._config(thread_id))
                    saved = (snap.config or {}).get("configurable", {}).get("checkpoint_id")
                    out.put(("values", StateAt(thread_id, snap.values, saved)))
            finally:
                out.kept_all(KEPT_WAIT)
                ow.store.threads.settle(run_id, thread_id, ApiRunStatus.SUCCESS)
                out.put(DONE)
                if control is not None:
                    control.close(run_id)
            return
        try:
            if control is not None and not control.attach(run_id, ow):
                status = _cancelled(ow, control, run_id, thread_id, before_start=True)
                return
            pairing = Pairing(out, thread_id, wanted, kept_by(ow.store.saver))
            start = Start(command, checkpoint_id, takeover, pause_at, pause_after)
            stream_through_outages(ow, pairing, graph_modes, start, control, run_id)
            pairing.flush()
            # What the stream fed is kept before anything says the run ended (a reader of
            # the store takes an ended record for a complete stream: onward.serve.replay).
            out.kept_all(KEPT_WAIT)
            last = pairing.last
            cancel = control.get(run_id) if control is not None else None
            row = ow.store.threads.get_run(run_id)
            run = ow.store.get_run(thread_id)
            ended = run is not None and run.status.finished  # no question, no pause left
            if row is None or (row.cancel is not None and row.status is not ApiRunStatus.RUNNING):
                status = None  # cancelled through the store: the drive settled its record
            elif cancel is not None and cancel.cancel is not None:
                status = _cancelled(ow, control, run_id, thread_id)  # type: ignore[arg-type]
            elif ended:
                status = ApiRunStatus.SUCCESS
            elif ow.pending(thread_id):
                # Waiting at a question is a run that ended well (LangGraph Server: the run
                # is "success", only the thread is "interrupted"); "interrupted" is a cancel.
                status = ApiRunStatus.SUCCESS
                if last is not None and "values" in wanted and "__interrupt__" not in last:
                    # A resumed drive that stops at a new question ends on a values chunk
                    # with the interrupts, as LangGraph Server's streams do.
                    snap = ow.graph.get_state(ow._config(thread_id))
                    out.put(
                        (
                            "values",
                            {
                                **chat_values(snap.values),
                                "__interrupt__": [jsonable(i) for i in snap.interrupts],
                            },
                        )
                    )
            elif pause_at and ow.get(thread_id).paused_before:
                status = ApiRunStatus.SUCCESS
            else:
                run = ow.store.get_run(thread_id)  # read again: the questions came after
                if run is not None and not run.status.finished:
                    if pause_after and ow.graph.get_state(ow._config(thread_id)).next:
                        status = ApiRunStatus.SUCCESS
                    else:
                        # Drained, or suspended until later: the record stays running, and
                        # recovery drives the run again once nobody holds its lease.
                        status = ApiRunStatus.RUNNING
            woken = True
        except DatabaseUnavailable as exc:  # gone past ONWARD_PG_OUTAGE: recovery goes on
            status, reachable = None, False
            out.unkept()  # its readers get the end now, not after another wait
            out.put(("error", cut_off(out, exc)))
        except LeaseLostError as exc:  # another driver took the run over: its record
            status = None
            out.put(("error", cut_off(out, exc)))
        except OnwardError as exc:
            status = ApiRunStatus.ERROR
            out.put(("error", {"error": type(exc).__name__, "message": str(exc)}))
        except Exception as exc:  # never a bare 500 mid-stream
            status = ApiRunStatus.ERROR
            out.put(("error", {"error": type(exc).__name__, "message": str(exc)[:500]}))
        finally:
            try:
                if reachable:
                    out.kept_all(KEPT_WAIT)
                    wake = [ow.store.waking(thread_id)] if woken else []
                    settle_record(ow, run_id, thread_id, status, wake)
            finally:  # the stream ends whatever the store did: never a hang
                out.put(DONE)
                if control is not None:
                    control.close(run_id)


@dataclass(frozen=True)
class Start:
    """What a drive starts from: the request's command and checkpoint (a drive that goes
    again after it made progress starts from its last saved step instead), its pauses."""

    command: Command[Any] | None
    checkpoint_id: str | None
    takeover: bool
    pause_at: Sequence[str]
    pause_after: Sequence[str]


def stream_through_outages(
    ow: Any,
    pairing: Pairing,
    modes: list[StreamMode],
    start: Start,
    control: Control | None,
    run_id: str,
) -> None:
    """Stream the run into ``pairing``; a drive that lost the database goes again, after a
    backoff with jitter, from the request's start while it had saved nothing, else from its
    last saved step (the effect ledger keeps every effect to once). The store's statements
    wait for the server themselves; :class:`DatabaseGone` (past ``ONWARD_PG_OUTAGE``), a
    cancel or a stopping server end it."""
    delay = BACKOFF_FIRST
    while True:
        before = pairing.supersteps
        try:
            for mode, data in ow.stream_modes(
                pairing.thread_id,
                pairing.graph_modes(modes),
                command=start.command,
                checkpoint_id=start.checkpoint_id,
                takeover=start.takeover,
                interrupt_before=start.pause_at,
                interrupt_after=start.pause_after,
                served=True,
            ):
                pairing.take(mode, data)
            return
        except DatabaseGone:
            raise
        except DatabaseUnavailable:
            asked = control.get(run_id) if control is not None else None
            if (control is not None and control.stopping) or (asked and asked.cancel):
                raise
        if pairing.supersteps > before:
            start = replace(start, command=None, checkpoint_id=None)
        # Its lease may outlive the lost drive (a release that did not reach the server).
        start = replace(start, takeover=True)
        time.sleep(delay * random.uniform(0.5, 1.5))
        delay = min(delay * 2, BACKOFF_MAX)


def cut_off(out: Feed, exc: OnwardError) -> dict[str, Any]:
    """The ``error`` event of a stream whose drive was cut off, not failed: the run is
    not lost; the event's id is the ``Last-Event-ID`` to join its stream again with."""
    resume = out.next_number
    if isinstance(exc, LeaseLostError):
        then = "another driver goes on with it"
    else:
        then = "it goes on from its last saved step once the database answers"
    return {
        "error": type(exc).__name__,
        "message": f"{exc}. The run is not lost: {then}; join its stream again with "
        f"Last-Event-ID {resume} for the rest",
        "last_event_id": str(resume),
    }


def settle_record(
    ow: Any, run_id: str, thread_id: str, status: ApiRunStatus | None, also: Sequence[Statement]
) -> None:
    """The run's record once its drive ended, with ``also`` (the store's statements wait
    out a blip; a database gone for good leaves it to recovery)."""
    with contextlib.suppress(StoreError):
        # No API row (a CLI run's thread): its thread's update changes nothing.
        ow.store.threads.settle(run_id, thread_id, status, also)


def _cancelled(
    ow: Any, control: Control, run_id: str, thread_id: str, *, before_start: bool = False
) -> ApiRunStatus | None:
    """A cancelled run's record after its drive stopped: *interrupted* (the thread keeps
    what it did; a later run goes on from there), or, for a rollback, removed with the
    checkpoints it made (None: no record left to set)."""
    active = control.get(run_id)
    action = active.cancel if active is not None else CancelAction.INTERRUPT
    row = ow.store.threads.get_run(run_id)
    if row is not None:
        stopping.settle(ow.store, row, action or CancelAction.INTERRUPT, before_start=before_start)
    return ApiRunStatus.INTERRUPTED if action is not CancelAction.ROLLBACK else None
