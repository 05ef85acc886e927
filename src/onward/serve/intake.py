"""A run request → its thread, its onward run and the command that drives it.

A thread's first input starts an onward run with the thread's id; later requests answer
its questions (``command.resume``, each answer signed with who gave it) or edit its state
(``command.update``). Everything a request asks for is honoured or refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from fastapi import HTTPException
from langgraph.types import Command

from onward.client import Onward, deciding, starting, views
from onward.errors import NoTemplateError, StoreError, TokenError, UsageError, refuse_unknown
from onward.model.clock import utcnow
from onward.observe import reading
from onward.observe.kinds import EventKind
from onward.people import resume_tokens
from onward.people.approvals import parse_answers
from onward.planning.validate import parse_declared
from onward.policies.confine import check_inputs
from onward.serve.cards import tool_names
from onward.serve.context import Serving
from onward.serve.edits import fork_point
from onward.serve.owners import client_update, message_text
from onward.serve.requests import (
    a_string,
    check_configurable,
    check_run_fields,
    check_start_input,
    kind,
    multitask_of,
    new_thread_id,
    pause_after,
    pause_before,
    run_metadata,
    tightened_budget,
    tightened_policy,
    webhook_of,
)
from onward.serve.views import (
    Known,
    at_checkpoint,
    check_assistant,
    check_visible,
    driven,
    not_found,
    read_thread,
)
from onward.serve.wire import ASSISTANT_ID, GRAPH_ID


def checkpoint_in(body: dict[str, Any]) -> str | None:
    """The checkpoint a request points at (``checkpoint_id`` or ``checkpoint``), if any."""
    checkpoint = body.get("checkpoint")
    if checkpoint is not None and not isinstance(checkpoint, dict):
        raise UsageError("checkpoint must be an object {checkpoint_id: ...}")
    found = body.get("checkpoint_id") or (checkpoint or {}).get("checkpoint_id")
    if found is not None and not isinstance(found, str):
        raise UsageError("checkpoint_id must be a string")
    return found or None


def run_checkpoint(body: dict[str, Any], thread_id: str) -> str | None:
    """The checkpoint a run request starts from: ``checkpoint_id``, ``checkpoint`` or its
    ``config.configurable`` (which must agree)."""
    named, configured = checkpoint_in(body), check_configurable(body, thread_id)
    if named and configured and named != configured:
        raise UsageError(
            "checkpoint_id and config.configurable.checkpoint_id name different checkpoints; "
            "send one"
        )
    return named or configured


def known_checkpoint(ow: Onward, thread_id: str, checkpoint_id: str | None) -> None:
    """A 422 unless ``checkpoint_id`` (when given) is one of the thread's checkpoints: a
    run from any other id would start the thread over on a new branch."""
    if not checkpoint_id:
        return
    found = None
    if ow.store.get_run(thread_id) is not None:
        found = ow.store.saver.get_tuple(at_checkpoint(ow, thread_id, checkpoint_id))
    if found is None:
        raise unknown_checkpoint(thread_id, checkpoint_id)


def unknown_checkpoint(thread_id: str, checkpoint_id: str) -> UsageError:
    return UsageError(
        f"checkpoint_id {checkpoint_id[:80]!r} is not a checkpoint of thread {thread_id} "
        "(its ids are in GET /threads/{id}/history); nothing was run"
    )


def prepare(
    ctx: Serving,
    thread_id: str,
    body: dict[str, Any],
    who: str,
    *,
    run_id: str | None = None,
    assistant_id: str | None = None,
    known: Known | None = None,
    modes: Sequence[str] = (),
) -> tuple[str, Command[Any] | None, str | None]:
    """Check the request, create the thread and run as needed; (run id, command, the
    checkpoint to run from). ``run_id``: a queued run's id (its row exists, pending);
    ``assistant_id``: the assistant the caller resolved (``ctx`` holds its rules);
    ``known``: the thread as the caller read it and found it free, under its lock (not
    read again); ``modes``: the stream modes the run streams (kept with its record, as
    is its ``multitask_strategy``)."""
    check_run_fields(body)
    if assistant_id is None:
        check_assistant(a_string(body, "assistant_id") or GRAPH_ID)
    metadata = run_metadata(body)
    a_string(body, "if_not_exists", ("create", "reject"))
    checkpoint_id = run_checkpoint(body, thread_id)
    ours = {"graph_id": GRAPH_ID, "assistant_id": assistant_id or ASSISTANT_ID}
    with ctx.clients.use() as ow:
        free = known is not None
        known = known or read_thread(ow, thread_id)
        fresh = None  # the thread's row, when this request makes it
        if known.row is None and not known.has_run:
            if body.get("if_not_exists") != "create":
                raise not_found(thread_id)
            new_thread_id(thread_id)
            known_checkpoint(ow, thread_id, checkpoint_id)  # a new thread has none
            fresh = ow.store.threads.made(thread_id, who, dict(ours))
            # None: another request made it first (whose it is, check_visible says).
            known = Known(fresh, False) if fresh else read_thread(ow, thread_id)
        check_visible(thread_id, known, who, ctx.tokens)
        if known.has_run:
            known_checkpoint(ow, thread_id, checkpoint_id)
        elif checkpoint_id:
            raise unknown_checkpoint(thread_id, checkpoint_id)
        if known.row is None:  # a run started outside the API: its row is made now
            fresh = ow.store.threads.made(thread_id, who, dict(ours))
        if not free and driven(ow, thread_id, has_run=known.has_run):
            raise HTTPException(
                409, f"thread {thread_id} has a run in progress; wait for it to finish"
            )
        command: Command[Any] | None = None
        started = False  # a new run: no checkpoint yet (the drive's first commit makes one)
        raw = body.get("command")
        if raw is not None and not isinstance(raw, dict):
            raise UsageError('command must be an object: {"resume": ...}')
        if raw:
            command = command_of(ow, thread_id, raw, checkpoint_id, who)
        elif not known.has_run:
            started = True
            try:
                start_run(ctx, ow, thread_id, body.get("input"), who)
            except StoreError:
                if ow.store.get_run(thread_id) is None:
                    raise
                raise HTTPException(  # two first requests raced: the other one won
                    409, f"thread {thread_id} has a run in progress; wait for it to finish"
                ) from None
        elif body.get("input") not in (None, {}):
            command = next_message(ow, thread_id, body["input"], checkpoint_id, who)
            checkpoint_id = None  # a follow-up (or its fork) is the thread's newest checkpoint
        # A row made just now is as accepted; one that names the graph is touched with
        # the run's record, and a new run's start event goes with them: one transaction.
        touch = fresh is None and accepted(ow, thread_id, known, ours)
        start = [(utcnow(), str(EventKind.API_RUN_STARTED), {"by": who}, None)] if started else []
        run_id = run_id or str(uuid.uuid4())
        ow.store.threads.add_run(
            run_id,
            thread_id,
            assistant_id or ASSISTANT_ID,
            metadata,
            pause_before=pause_before(body),
            from_checkpoint=checkpoint_id
            or (None if started else reading.newest_checkpoint(ow, thread_id)),
            pause_after=pause_after(body),  # a drive after a restart honours them too
            webhook=webhook_of(body),
            multitask_strategy=multitask_of(body),
            stream_mode=modes,
            touch=touch,
            also=ow.store.events.statements(thread_id, start),
        )
        return run_id, command, checkpoint_id


def accepted(ow: Onward, thread_id: str, known: Known, ours: dict[str, str]) -> bool:
    """The thread's row once a run is accepted: updated now, its metadata naming the graph
    and assistant (merged into what it has). A row read under the thread's lock that
    names them already is only touched: no read of it again, no metadata written over;
    True: that touch is the caller's to write (with the run's record)."""
    row = known.row
    if row is not None and all(row.metadata.get(k) == v for k, v in ours.items()):
        return True
    ow.store.threads.merge_metadata(thread_id, dict(ours))
    return False


FOLLOW_UP_FIELDS = ("messages", "goal")


def next_message(
    ow: Onward, thread_id: str, data: Any, checkpoint_id: str | None, who: str
) -> Command[Any] | None:
    """A human message on a thread that already has a run (the conversation model):

    * waiting for a person: it answers the question as a ``respond`` decision (feedback);
    * finished: it is the thread's next goal (a new plan version; done steps kept);
    * with a ``checkpoint_id`` in the thread's past (an edited earlier message): that
      message's goal again, from just before it (:func:`~onward.serve.edits.fork_point`),
      a fork of the thread.

    A goal no planner handles gets an assistant message saying why and what to do. A run
    in progress is a 409; fields a follow-up cannot take are a 422."""
    if not isinstance(data, dict):
        raise UsageError('a follow-up input is {"messages": [...]} (or {"goal": "..."})')
    extra = sorted(set(data) - set(FOLLOW_UP_FIELDS))
    if extra:
        raise UsageError(
            f"input.{extra[0]} is not taken by a follow-up on thread {thread_id} (it already "
            "has a run): send only messages, or start a new thread"
        )
    text = goal_text(data)
    if not text:
        raise UsageError("a follow-up needs a human message (or goal) with text")
    pending = [] if checkpoint_id else ow.pending(thread_id)
    if pending:
        iid = pending[0].interrupt_id
        group = [p for p in pending if p.interrupt_id == iid]
        cannot = [p for p in group if "respond" not in p.allowed]
        if cannot:
            kinds = ", ".join(sorted({p.kind.value for p in cannot}))
            raise UsageError(
                f"the question waiting on thread {thread_id} ({kinds}) takes a decision, not a "
                f"message: answer it with command.resume ({', '.join(cannot[0].allowed)})"
            )
        value = {"decisions": [{"type": "respond", "message": text} for _ in group]}
        check_tokens(ow, thread_id, value, who)
        return Command(resume={iid: resume_value(value, who, [])})
    from onward.client.following import follow_up

    if checkpoint_id:  # an edited message: fork from just before it (onward.serve.edits)
        checkpoint_id = fork_point(ow, thread_id, checkpoint_id)
    try:
        follow_up(ow, thread_id, text, checkpoint_id=checkpoint_id)
    except NoTemplateError as exc:
        tell_no_plan(ow, thread_id, text, str(exc), checkpoint_id)
        return ENDED
    return None


def tell_no_plan(
    ow: Onward, thread_id: str, text: str, why: str, checkpoint_id: str | None
) -> None:
    """The thread's answer to a goal no planner handles: the message and why, the run
    left as it was (finished)."""
    from langchain_core.messages import AIMessage, HumanMessage

    from onward.observe.chat import NO_PLAN_HELP

    at = views.config(thread_id)
    if checkpoint_id:
        at["configurable"] |= {"checkpoint_id": checkpoint_id, "checkpoint_ns": ""}
    reply = AIMessage(f"I cannot plan this goal: {why}\n\n{NO_PLAN_HELP}")
    ow.graph.update_state(at, {"messages": [HumanMessage(text), reply]}, as_node="finalize")


def goal_text(data: dict[str, Any]) -> str | None:
    """The goal a run input states: ``goal``, else the last human message's text."""
    goal = data.get("goal")
    if goal is None and data.get("messages"):
        messages = data["messages"]
        if not isinstance(messages, list):
            raise UsageError("input.messages must be a list of messages")
        humans = [
            m
            for m in messages
            if isinstance(m, dict) and m.get("type", m.get("role")) in ("human", "user")
        ]
        if humans:
            goal = message_text(humans[-1].get("content"), "the last human message") or None
    if goal is not None and not isinstance(goal, str):
        raise UsageError("input.goal must be a string")
    return goal


def start_run(ctx: Serving, ow: Onward, thread_id: str, data: Any, who: str) -> None:
    """A thread's first input → an onward run with the thread's id. Everything the
    input asks for is honoured or refused: a declared plan keeps its acceptance checks
    and max_concurrency; policy and budget may only tighten the server's."""
    if not isinstance(data, dict):
        raise UsageError('a run\'s input is {"goal": "...", "plan": {...}} or {"messages": [...]}')
    check_start_input(data)
    goal = goal_text(data)
    run_policy = tightened_policy(ctx.policy, data.get("policy"))
    run_budget = tightened_budget(ctx.budget, data.get("budget"))
    raw_inputs = data.get("inputs") or []
    if not isinstance(raw_inputs, list) or not all(isinstance(i, str) for i in raw_inputs):
        raise UsageError("input.inputs must be a list of file names")
    inputs = list(raw_inputs)
    check_inputs(ctx.root, inputs, confined=True)  # before the plan: what is wrong first
    plan = None
    declared_goal = None
    concurrency = None
    if data.get("plan") is not None:
        declared = data["plan"]
        if isinstance(declared, dict) and "goal" not in declared:
            declared = {"goal": goal or "run plan", **declared}
        declared_goal, plan, concurrency = parse_declared(
            declared, ow.registry, source="input.plan", allow_tools=run_policy.allow_tools
        )
        inputs = [*declared_goal.inputs, *inputs]
    starting.start(
        ow,
        goal or (declared_goal.objective if declared_goal else None),
        plan=plan,
        inputs=inputs,
        workdir=ctx.root,
        thread_id=thread_id,
        policy=run_policy,
        budget=run_budget,
        max_concurrency=concurrency,
        judge=False,
        acceptance=declared_goal.acceptance if declared_goal else (),
        constraints=declared_goal.constraints if declared_goal else None,
        fail_fast=False,  # no planner for the goal: the thread's message says so
        fresh=True,  # prepare read the thread under its lock: no run has it
    )


def command_of(
    ow: Onward, thread_id: str, raw: dict[str, Any], checkpoint_id: str | None, who: str
) -> Command[Any]:
    """A request's ``command``: answers to the run's questions, an edit of its state."""
    refuse_unknown(raw, ("resume", "update", "goto"), "command")
    if raw.get("goto") not in (None, [], ""):  # RemoteGraph always sends goto: []
        resolve_to_end(ow, thread_id, raw, who)
        return ENDED
    if raw.get("resume") is None and raw.get("update") is None:
        raise UsageError(
            "command needs resume (an answer to the run's question) or update "
            "(an edit of its state)"
        )
    if ow.store.get_run(thread_id) is None:
        raise UsageError("the thread has no run yet: start one with an input")
    update: dict[str, Any] | None = None
    if raw.get("update") is not None:
        state, _next = ow.state_at(thread_id, checkpoint_id)
        update = client_update(state, raw["update"], ow.registry)
    questions = ow.pending(thread_id)
    resume = tool_names(raw.get("resume"), questions)  # an escalation card's title: its tool
    pending = [p.interrupt_id for p in questions]
    token_types(resume, pending)
    if resume is not None:
        check_tokens(ow, thread_id, resume, who)
        resume = resume_value(resume, who, pending)
        check_answers(ow, thread_id, resume)
    return Command(resume=resume, update=update)


def check_answers(ow: Onward, thread_id: str, resume: Any) -> None:
    """Refuse, with a 422 that says why, an answer the run would refuse: the wrong number
    of decisions for a wave's questions, decisions for steps not asked, an invalid edit.
    Nothing changes then; a valid answer goes to the graph."""
    pending = ow.pending(thread_id)
    ids = list(dict.fromkeys(p.interrupt_id for p in pending))
    if not ids:
        return
    answers = by_interrupt(resume, ids) or {ids[0]: resume}
    if len(ids) > 1 and not by_interrupt(resume, ids):
        return  # LangGraph itself asks for the interrupt id (several questions)
    for iid, value in answers.items():
        group = [p for p in pending if p.interrupt_id == iid]
        pairs = parse_answers(value, [(deciding.target_id(p), p.kind) for p in group])
        for i, answer in pairs:
            deciding.preflight(ow, thread_id, group[i], answer)


ENDED: Command[Any] = Command(goto="__end__")
"""The command of a request that ended its run (see :func:`resolve_to_end`): the drive runs
nothing and reports the final state (compared by identity)."""

RESOLVED = "marked as resolved"
"""The reason a run ended by ``command.goto = "__end__"`` carries (agent-chat-ui's "Mark as
Resolved"): status ``cancelled``, decision ``cancel``."""


def resolve_to_end(ow: Onward, thread_id: str, raw: dict[str, Any], who: str) -> None:
    """``goto: "__end__"``: the person ends the run here, as resolved; nothing runs after
    it (no pending question, step or effect). Any other target is refused: a run goes
    where its state routes it."""
    goto = raw["goto"]
    if goto != "__end__":
        raise UsageError(
            f'command.goto {str(goto)[:80]!r} is not supported: only "__end__" (end the run '
            "as resolved) is; a run goes where its state routes it"
        )
    if raw.get("update") is not None or not only_tokens(raw.get("resume")):
        raise UsageError(
            'command.goto "__end__" ends the run: send it without update, and with resume '
            'only to carry resume tokens ({"token": ...}, or keyed by interrupt id)'
        )
    if ow.store.get_run(thread_id) is None:
        raise UsageError("the thread has no run yet: start one with an input")
    end_tokens(ow, thread_id, raw.get("resume"), who)
    from onward.client.lifecycle import cancel

    cancel(ow, thread_id, compensate=False, reason=RESOLVED, by=who)


def only_tokens(resume: Any) -> bool:
    """Whether ``resume`` (beside ``goto``) holds nothing but resume tokens."""
    if resume is None:
        return True
    if not isinstance(resume, dict) or not resume:
        return False
    if set(resume) == {"token"}:
        return True
    return all(isinstance(v, dict) and set(v) == {"token"} for v in resume.values())


def end_tokens(ow: Onward, thread_id: str, resume: Any, who: str) -> None:
    """With ONWARD_SECRET, ending a run that waits on questions closes them, so it needs
    what answering them needs: a resume token for each waiting question (unkeyed for one,
    keyed by interrupt id for several), as any other answer does."""
    if not resume_tokens.secret():
        return
    ids = list(dict.fromkeys(p.interrupt_id for p in ow.pending(thread_id)))
    if not ids:
        return
    token_types(resume, ids)
    keyed = by_interrupt(resume, ids)
    if keyed is None and len(ids) > 1:
        keyed = {}
    if keyed is not None and set(keyed) != set(ids):
        missing = ", ".join(i for i in ids if i not in keyed)
        raise TokenError(
            f"ending this run closes every waiting question: send a resume token for each, "
            f"keyed by interrupt id (missing: {missing})"
        )
    check_tokens(ow, thread_id, resume or {}, who)


def token_types(resume: Any, pending_ids: list[str]) -> None:
    """A 422 for a resume ``token`` that is not a string (it names the field)."""
    keyed = by_interrupt(resume, pending_ids)
    answers = keyed.items() if keyed else [("", resume)]
    for iid, answer in answers:
        token = answer.get("token") if isinstance(answer, dict) else None
        if token is not None and not isinstance(token, str):
            where = f"command.resume.{iid}.token" if iid else "command.resume.token"
            raise UsageError(
                f"{where} must be a string (a resume token from onward inbox or GET "
                f"/onward/runs/{{id}}), not {kind(token)}"
            )


def by_interrupt(value: Any, pending_ids: list[str]) -> dict[str, Any] | None:
    """A resume keyed by interrupt id (several questions), or None (one answer)."""
    keyed = isinstance(value, dict) and value and set(value) <= set(pending_ids)
    return value if keyed else None


def resume_value(value: Any, who: str, pending_ids: list[str]) -> Any:
    """Mark who answers each question (a bare list is the ``decisions`` list)."""

    def sign(answer: Any) -> Any:
        if isinstance(answer, list):
            answer = {"decisions": answer}
        return {**answer, "by": who} if isinstance(answer, dict) else answer

    keyed = by_interrupt(value, pending_ids)
    return {iid: sign(v) for iid, v in keyed.items()} if keyed else sign(value)


def check_tokens(ow: Onward, thread_id: str, value: Any, who: str) -> None:
    """With ONWARD_SECRET, each answer carries a resume token minted for this user
    (``onward inbox`` and ``GET /onward/runs/{id}`` hand them out): for a wave's batch, the
    batch token, or a question's own token when the answer names that one step."""
    key = resume_tokens.secret()
    if not key:
        return
    pending = ow.pending(thread_id)
    ids = list(dict.fromkeys(p.interrupt_id for p in pending))
    answers = by_interrupt(value, ids) or {ids[0] if ids else "": value}
    for iid, answer in answers.items():
        token = answer.get("token") if isinstance(answer, dict) else None
        targets = answer.get("targets") if isinstance(answer, dict) else None
        subject = iid
        group = [p for p in pending if p.interrupt_id == iid]
        if isinstance(targets, list) and len(targets) == 1 and len(group) > 1:
            subject = f"{iid}:{targets[0]}"
        resume_tokens.verify(
            key, token, thread_id=thread_id, interrupt_id=subject, user=who, now=ow.clock()
        )
