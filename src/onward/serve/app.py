"""``onward serve``: the LangGraph Server API over onward's own store, plus a web page.

LangChain's clients (``langgraph_sdk``, ``RemoteGraph``, agent-chat-ui) talk to it as to a
LangGraph Server: assistants (one, ``onward``), threads, thread state and history, and
runs streamed over server-sent events. Underneath, a thread is an onward run: a run's
input is an onward start request (``{"goal": ..., "plan": {...}}``) or chat messages
(the last human message is the goal); interrupts are onward's approval questions in the
human-in-the-loop batched shape; ``command.resume`` answers them. Every drive holds the
run's lease, on SQLite or Postgres, as a CLI drive does.

Drives run on their own threads with their own :class:`~onward.Onward` client, and feed
the response through a queue: a client that disconnects does not stop the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.routing import APIRoute
from langchain_core.language_models import BaseChatModel
from langgraph.types import Command, StreamMode
from pydantic import ValidationError
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from onward import tokens
from onward.checkpointing.threads import ApiRunStatus, ThreadRow
from onward.client import Onward
from onward.confine import check_inputs
from onward.errors import (
    ForbiddenError,
    OnwardError,
    RequestLimitError,
    StoreError,
    UsageError,
    refuse_unknown,
    validation_message,
)
from onward.graph.routing import GATE
from onward.owners import client_update, message_text
from onward.planning.validate import parse_declared
from onward.policy import RunPolicy
from onward.serve import auth
from onward.serve.feed import DONE, Feed
from onward.serve.limits import BodyLimit, RunPool, ServeLimits
from onward.serve.recovery import Recovery
from onward.serve.requests import (
    MAX_PAGE,
    START_FIELDS,
    a_string,
    an_object,
    check_run_fields,
    count,
    kind,
    parse_body,
    strings,
    tightened_budget,
    tightened_policy,
)
from onward.serve.wire import (
    ASSISTANT_ID,
    EPOCH,
    GRAPH_ID,
    assistant,
    chunk,
    jsonable,
    thread_state,
)
from onward.state import Budget, RunStatus

CORS_ENV = "ONWARD_CORS_ORIGINS"
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


class Clients:
    """A pool of :class:`Onward` clients (each one is used by one thread at a time)."""

    def __init__(self, factory: Callable[[], Onward]) -> None:
        self._factory = factory
        self._free: queue.SimpleQueue[Onward] = queue.SimpleQueue()
        self._all: list[Onward] = []
        self._lock = threading.Lock()

    @contextmanager
    def use(self) -> Iterator[Onward]:
        try:
            client = self._free.get_nowait()
        except queue.Empty:
            client = self._factory()
            with self._lock:
                self._all.append(client)
        try:
            yield client
        finally:
            self._free.put(client)

    def drain(self) -> None:
        """Ask every drive to stop before its next node."""
        with self._lock:
            for client in self._all:
                client.deps.draining.set()

    def close(self) -> None:
        with self._lock:
            for client in self._all:
                client.close()
            self._all.clear()


class _Request(Request):
    """A request whose JSON body is read by :func:`~onward.serve.requests.parse_body`
    (FastAPI reads a body through ``json()``): what it refuses is a 422 that says why."""

    async def json(self) -> Any:
        if not hasattr(self, "_parsed"):
            try:
                self._parsed = parse_body(await self.body())
            except UsageError as exc:
                raise HTTPException(422, str(exc)) from None
        return self._parsed


class _Route(APIRoute):
    """Reads bodies with :class:`_Request`; a NUL character in the path or the query is a
    422 (no id holds one, and not every store can even look one up)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            params = [*request.path_params.items(), *request.query_params.multi_items()]
            for name, value in params:
                if "\x00" in str(name) + str(value):
                    raise HTTPException(422, f"{name}: a NUL character (%00) is no valid value")
            return await handler(_Request(request.scope, request.receive))

        return strict


def _not_found(thread_id: str) -> HTTPException:
    return HTTPException(404, f"Thread {thread_id} not found")


def create_app(
    db: str | None = None,
    *,
    workdir: str | Path | None = None,
    tool_modules: Sequence[str] = (),
    model: BaseChatModel | Literal["env"] | None = "env",
    cors_origins: Sequence[str] | None = None,
    policy: RunPolicy | None = None,
    budget: Budget | None = None,
    limits: ServeLimits | None = None,
    open_docs: bool = False,
    recover: bool = True,
) -> FastAPI:
    """The ASGI app. ``workdir``: where runs started through the API work (default cwd);
    their tools may only use paths inside it. ``cors_origins``: browser origins allowed
    to call the API from other sites ($ONWARD_CORS_ORIGINS, comma-separated; none by
    default: a page on another site must not drive runs on this machine).

    ``policy`` and ``budget``: the rules every API run follows (a start request may only
    tighten them). ``limits``: request size, run slots, runs per user (default from
    $ONWARD_MAX_BODY, $ONWARD_RUN_SLOTS, $ONWARD_USER_RUNS). ``open_docs``: serve
    ``/docs`` and ``/openapi.json`` without a token (with tokens configured they need one).
    ``recover``: finish runs whose driver died (a crashed server) once their lease expires;
    False leaves them to ``onward worker`` processes."""
    root = Path(workdir or Path.cwd()).absolute()
    api_tokens = auth.tokens_from_env()
    base_policy = (policy or RunPolicy()).model_copy(update={"confine_paths": True})
    base_budget = budget or Budget()
    limits = limits or ServeLimits.from_env(dict(os.environ))
    if cors_origins is None:
        cors_origins = [o.strip() for o in os.environ.get(CORS_ENV, "").split(",") if o.strip()]
    clients = Clients(lambda: Onward(db, tool_modules=tool_modules, model=model))
    with clients.use() as probe:  # open the store now: a bad URL or key fails at start-up
        graph_json = probe.graph.get_graph().to_json()
    pool = RunPool(limits)
    docs_open = open_docs or not api_tokens
    app = FastAPI(
        title="onward",
        version="1",
        docs_url="/docs" if docs_open else None,
        redoc_url="/redoc" if docs_open else None,
        openapi_url="/openapi.json" if docs_open else None,
    )
    app.router.route_class = _Route
    app.add_middleware(BodyLimit, limit=limits.max_body)
    if cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["*"],
            allow_headers=["*"],
            expose_headers=["content-location", "x-pagination-total", "x-pagination-next"],
        )
    app.state.clients = clients

    @app.on_event("shutdown")
    def _close() -> None:
        # Drives stop at their next node (the last superstep is saved); a restarted server
        # or a worker goes on from there.
        recovery.stop()
        clients.drain()
        pool.close()
        clients.close()

    @app.exception_handler(ValidationError)
    def _invalid(request: Request, exc: ValidationError) -> JSONResponse:
        return JSONResponse(
            {"detail": f"invalid request: {validation_message(exc)}"}, status_code=422
        )

    @app.exception_handler(RequestValidationError)
    def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for e in exc.errors():
            where = ".".join(str(p) for p in e["loc"]) or "(request)"
            problem = f"{where}: {e['msg']}"
            if tuple(e["loc"]) == ("body",):
                problem += " (send a JSON object with Content-Type: application/json)"
            problems.append(problem)
        return JSONResponse({"detail": f"invalid request: {'; '.join(problems)}"}, 422)

    @app.exception_handler(TypeError)
    @app.exception_handler(ValueError)
    def _malformed(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(
            {"detail": f"malformed request ({type(exc).__name__}: {exc})"}, status_code=422
        )

    @app.exception_handler(OnwardError)
    def _onward_error(request: Request, exc: OnwardError) -> JSONResponse:
        headers = {}
        if isinstance(exc, RequestLimitError) and exc.retry_after is not None:
            headers["Retry-After"] = str(exc.retry_after)
        return JSONResponse(
            {"detail": str(exc), "error": type(exc).__name__},
            status_code=exc.http_status,
            headers=headers,
        )

    def user(
        authorization: str | None = Header(default=None),
        x_api_key: str | None = Header(default=None),
    ) -> str:
        found = auth.user_for(api_tokens, authorization, x_api_key)
        if found is None:
            raise HTTPException(401, "missing or unknown token: send Authorization: Bearer TOKEN")
        return found

    if not docs_open:

        @app.get("/openapi.json", include_in_schema=False)
        def openapi(who: str = Depends(user)) -> Any:
            return app.openapi()

    # -- threads ------------------------------------------------------------

    def visible(ow: Onward, thread_id: str, who: str) -> ThreadRow | None:
        """The thread's API row (None for a run started outside the API); 404 when the
        thread does not exist or belongs to someone else."""
        row = ow.store.threads.get(thread_id)
        if row is None:
            if api_tokens or ow.store.get_run(thread_id) is None:
                raise _not_found(thread_id)
            return None
        if api_tokens and row.owner != who:
            raise _not_found(thread_id)
        return row

    def thread_status(ow: Onward, thread_id: str) -> str:
        run = ow.store.get_run(thread_id)
        if run is None:
            return "idle"
        lease = ow.store.leases.get(thread_id)
        if lease is not None and lease.expires_at > ow.store.leases.clock():
            return "busy"
        if ow.pending(thread_id):
            return "interrupted"
        return "error" if run.status is RunStatus.FAILED else "idle"

    def thread_json(ow: Onward, thread_id: str, row: ThreadRow | None) -> dict[str, Any]:
        run = ow.store.get_run(thread_id)
        values: Any = None
        interrupts: dict[str, Any] = {}
        if run is not None:
            snap = ow.graph.get_state(ow._config(thread_id))
            values = jsonable(snap.values) if snap.values else None
            for task in snap.tasks:
                if task.interrupts:
                    interrupts[task.id] = [jsonable(i) for i in task.interrupts]
        created = (
            row.created_at.isoformat() if row else run.created_at.isoformat() if run else EPOCH
        )
        updated = (
            row.updated_at.isoformat() if row else run.updated_at.isoformat() if run else EPOCH
        )
        metadata = dict(row.metadata) if row else {"graph_id": GRAPH_ID}
        return {
            "thread_id": thread_id,
            "created_at": created,
            "updated_at": updated,
            "state_updated_at": run.updated_at.isoformat() if run else updated,
            "metadata": metadata,
            "config": {},
            "status": thread_status(ow, thread_id),
            "values": values,
            "interrupts": interrupts,
        }

    @app.get("/ok")
    def ok() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/info")
    def info() -> dict[str, Any]:
        from importlib.metadata import version

        return {
            "version": version("onward"),
            "langgraph_py_version": version("langgraph"),
            "flags": {"assistants": True, "crons": False, "langsmith": False},
            "host": {"kind": "onward", "project_id": None, "revision_id": None},
        }

    @app.post("/assistants/search")
    def assistants_search(body: dict[str, Any] | None = None, who: str = Depends(user)) -> Any:
        body = body or {}
        wanted = a_string(body, "graph_id")
        meta = an_object(body, "metadata")
        offset, limit = count(body, "offset", 0), count(body, "limit", 10, most=MAX_PAGE)
        a = assistant()
        if (wanted and wanted != GRAPH_ID) or any(
            a["metadata"].get(k) != v for k, v in meta.items()
        ):
            return []
        return [a][offset:][:limit]

    @app.post("/assistants/count")
    def assistants_count(body: dict[str, Any] | None = None, who: str = Depends(user)) -> int:
        return len(assistants_search(body, who))

    def check_assistant(assistant_id: str) -> None:
        if assistant_id not in (GRAPH_ID, ASSISTANT_ID):
            raise HTTPException(404, f"Assistant {assistant_id} not found; use {GRAPH_ID!r}")

    @app.get("/assistants/{assistant_id}")
    def assistant_get(assistant_id: str, who: str = Depends(user)) -> Any:
        check_assistant(assistant_id)
        return assistant()

    @app.get("/assistants/{assistant_id}/graph")
    def assistant_graph(assistant_id: str, who: str = Depends(user)) -> Any:
        check_assistant(assistant_id)
        nodes = []
        for node in graph_json["nodes"]:
            data = node.get("data")
            if isinstance(data, dict):
                node = {**node, "data": {k: v for k, v in data.items() if k != "id"}}
            nodes.append(node)
        edges = [
            {k: v for k, v in e.items() if k in ("source", "target", "data", "conditional")}
            for e in graph_json["edges"]
        ]
        return {"nodes": nodes, "edges": edges}

    @app.post("/threads")
    def thread_create(body: dict[str, Any] | None = None, who: str = Depends(user)) -> Any:
        body = body or {}
        thread_id = a_string(body, "thread_id") or str(uuid.uuid4())
        try:
            uuid.UUID(thread_id)
        except ValueError:
            raise HTTPException(422, f"thread_id {thread_id!r} is not a UUID") from None
        a_string(body, "if_exists", ("raise", "do_nothing"))
        metadata = {"graph_id": GRAPH_ID, "assistant_id": ASSISTANT_ID}
        metadata |= an_object(body, "metadata")
        with clients.use() as ow:
            if api_tokens and ow.store.get_run(thread_id) is not None:
                # A run started outside the API (or by someone else) is nobody's to claim.
                row = ow.store.threads.get(thread_id)
                if row is None or row.owner != who:
                    raise _not_found(thread_id)
            if not ow.store.threads.create(thread_id, who, metadata):
                row = visible(ow, thread_id, who)  # another user's thread: 404, not 409
                if body.get("if_exists") == "do_nothing":
                    return thread_json(ow, thread_id, row)
                raise HTTPException(409, f"Thread {thread_id} already exists")
            return thread_json(ow, thread_id, ow.store.threads.get(thread_id))

    @app.post("/threads/search")
    def thread_search(body: dict[str, Any] | None = None, who: str = Depends(user)) -> Any:
        body = body or {}
        meta = an_object(body, "metadata")
        status = a_string(body, "status")
        ids = set(strings(body, "ids"))
        descending = a_string(body, "sort_order", ("asc", "desc")) != "asc"
        offset, limit = count(body, "offset", 0), count(body, "limit", 10, most=MAX_PAGE)
        out = []
        with clients.use() as ow:
            rows = ow.store.threads.all(who if api_tokens else None)
            known = {r.thread_id for r in rows}
            found: list[tuple[str, ThreadRow | None]] = [(r.thread_id, r) for r in rows]
            if not api_tokens:  # runs started outside the API are listed too
                found += [
                    (r.thread_id, None)
                    for r in ow.store.list_runs(1000)
                    if r.thread_id not in known
                ]
            for tid, row in found:
                if ids and tid not in ids:
                    continue
                doc = thread_json(ow, tid, row)
                if any(doc["metadata"].get(k) != v for k, v in meta.items()):
                    continue
                if status and doc["status"] != status:
                    continue
                out.append(doc)
        out.sort(key=lambda d: d["updated_at"], reverse=descending)
        return out[offset : offset + limit]

    @app.get("/threads/{thread_id}")
    def thread_get(thread_id: str, who: str = Depends(user)) -> Any:
        with clients.use() as ow:
            return thread_json(ow, thread_id, visible(ow, thread_id, who))

    @app.patch("/threads/{thread_id}")
    def thread_patch(thread_id: str, body: dict[str, Any], who: str = Depends(user)) -> Any:
        metadata = an_object(body, "metadata")
        with clients.use() as ow:
            visible(ow, thread_id, who)
            if ow.store.threads.get(thread_id) is None:
                ow.store.threads.create(thread_id, who, {"graph_id": GRAPH_ID})
            ow.store.threads.merge_metadata(thread_id, metadata)
            return thread_json(ow, thread_id, ow.store.threads.get(thread_id))

    @app.delete("/threads/{thread_id}", status_code=204)
    def thread_delete(thread_id: str, who: str = Depends(user)) -> Response:
        with clients.use() as ow:
            visible(ow, thread_id, who)
            if thread_status(ow, thread_id) == "busy":
                raise HTTPException(409, f"Thread {thread_id} has a run in progress")
            if ow.store.get_run(thread_id) is not None:
                _rows, shas = ow.store.delete_run(thread_id)
                ow.store.delete_unused_bodies(shas)
            ow.store.threads.delete(thread_id)
        return Response(status_code=204)

    # -- state and history ---------------------------------------------------

    def state_at(ow: Onward, thread_id: str, checkpoint_id: str | None) -> dict[str, Any]:
        config = ow._config(thread_id)
        if checkpoint_id:
            config["configurable"] |= {"checkpoint_id": checkpoint_id, "checkpoint_ns": ""}
        snap = ow.graph.get_state(config)
        if checkpoint_id and snap.created_at is None:
            raise HTTPException(404, f"Checkpoint {checkpoint_id} not found")
        return thread_state(snap)

    @app.get("/threads/{thread_id}/state")
    def state_get(thread_id: str, who: str = Depends(user)) -> Any:
        with clients.use() as ow:
            visible(ow, thread_id, who)
            return state_at(ow, thread_id, None)

    @app.get("/threads/{thread_id}/state/{checkpoint_id}")
    def state_get_at(thread_id: str, checkpoint_id: str, who: str = Depends(user)) -> Any:
        with clients.use() as ow:
            visible(ow, thread_id, who)
            return state_at(ow, thread_id, checkpoint_id)

    @app.post("/threads/{thread_id}/state/checkpoint")
    def state_post_checkpoint(
        thread_id: str, body: dict[str, Any], who: str = Depends(user)
    ) -> Any:
        checkpoint_id = checkpoint_in(body)
        with clients.use() as ow:
            visible(ow, thread_id, who)
            return state_at(ow, thread_id, checkpoint_id)

    def checkpoint_in(body: dict[str, Any]) -> str | None:
        checkpoint = body.get("checkpoint")
        if checkpoint is not None and not isinstance(checkpoint, dict):
            raise UsageError("checkpoint must be an object {checkpoint_id: ...}")
        found = body.get("checkpoint_id") or (checkpoint or {}).get("checkpoint_id")
        if found is not None and not isinstance(found, str):
            raise UsageError("checkpoint_id must be a string")
        return found or None

    @app.post("/threads/{thread_id}/state")
    def state_update(thread_id: str, body: dict[str, Any], who: str = Depends(user)) -> Any:
        """A client's edit: only client-owned fields, validated like a plan revision
        (:func:`onward.owners.client_update`); applied as the schedule node, so the run
        goes on from there (at a past checkpoint: a new branch of the thread)."""
        refuse_unknown(body, ("values", "as_node", "checkpoint_id", "checkpoint"), "state update")
        as_node = body.get("as_node")
        if as_node not in (None, GATE):
            raise ForbiddenError(
                f"as_node {as_node!r}: a client's edit is applied as the {GATE!r} node (leave "
                "as_node out); nodes' own updates are onward's"
            )
        with clients.use() as ow:
            visible(ow, thread_id, who)
            if ow.store.get_run(thread_id) is None:
                raise HTTPException(400, f"Thread {thread_id} has no run yet: start one first")
            if thread_status(ow, thread_id) == "busy":
                raise HTTPException(409, f"Thread {thread_id} has a run in progress")
            checkpoint_id = checkpoint_in(body)
            state, _next = ow.state_at(thread_id, checkpoint_id)
            if state.goal is None:
                raise UsageError(
                    "that checkpoint holds no run state yet (the run's input); edit a later one"
                )
            writes = client_update(state, body.get("values"), ow.registry)
            config = ow._config(thread_id)
            if checkpoint_id:
                config["configurable"] |= {"checkpoint_id": checkpoint_id, "checkpoint_ns": ""}
            new = ow.graph.update_state(config, writes, as_node=GATE)
            ow.store.events.record(
                thread_id,
                "state_updated",
                {"by": who, "checkpoint_id": checkpoint_id, "fields": sorted(writes)},
            )
            return {"checkpoint": {k: v for k, v in new["configurable"].items()}}

    def history(thread_id: str, body: dict[str, Any], who: str) -> Any:
        limit = count(body, "limit", 10, most=MAX_PAGE)
        metadata = an_object(body, "metadata") or None
        before = body.get("before")
        if isinstance(before, dict):
            before = before.get("checkpoint_id")
        if before is not None and not isinstance(before, str):
            raise UsageError(
                f"before must be a checkpoint id or {{checkpoint_id: ...}}, not {kind(before)}"
            )
        with clients.use() as ow:
            visible(ow, thread_id, who)
            if ow.store.get_run(thread_id) is None:
                return []
            before_config = (
                {"configurable": {"thread_id": thread_id, "checkpoint_id": before}}
                if before
                else None
            )
            snaps = ow.graph.get_state_history(
                ow._config(thread_id),
                limit=limit,
                before=before_config,  # type: ignore[arg-type]
                filter=metadata,
            )
            return [thread_state(s) for s in snaps]

    @app.post("/threads/{thread_id}/history")
    def history_post(
        thread_id: str, body: dict[str, Any] | None = None, who: str = Depends(user)
    ) -> Any:
        return history(thread_id, body or {}, who)

    @app.get("/threads/{thread_id}/history")
    def history_get(
        thread_id: str, limit: int = 10, before: str | None = None, who: str = Depends(user)
    ) -> Any:
        return history(thread_id, {"limit": limit, "before": before}, who)

    # -- runs --------------------------------------------------------------

    def start_run(ow: Onward, thread_id: str, data: Any, who: str) -> None:
        """A thread's first input → an onward run with the thread's id. Everything the
        input asks for is honoured or refused: a declared plan keeps its acceptance checks
        and max_concurrency; policy and budget may only tighten the server's."""
        if not isinstance(data, dict):
            raise UsageError(
                'a run\'s input is {"goal": "...", "plan": {...}} or {"messages": [...]}'
            )
        refuse_unknown(data, START_FIELDS, "input")
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
        run_policy = tightened_policy(base_policy, data.get("policy"))
        run_budget = tightened_budget(base_budget, data.get("budget"))
        raw_inputs = data.get("inputs") or []
        if not isinstance(raw_inputs, list) or not all(isinstance(i, str) for i in raw_inputs):
            raise UsageError("input.inputs must be a list of file names")
        inputs = list(raw_inputs)
        check_inputs(root, inputs, confined=True)  # before the plan: what is wrong first
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
        ow.start(
            goal or (declared_goal.objective if declared_goal else None),
            plan=plan,
            inputs=inputs,
            workdir=root,
            thread_id=thread_id,
            policy=run_policy,
            budget=run_budget,
            max_concurrency=concurrency,
            acceptance=declared_goal.acceptance if declared_goal else (),
            constraints=declared_goal.constraints if declared_goal else None,
        )
        ow.store.events.record(thread_id, "api_run_started", {"by": who})

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
        (``onward inbox`` and ``GET /onward/runs/{id}`` hand them out)."""
        key = tokens.secret()
        if not key:
            return
        pending = [p.interrupt_id for p in ow.pending(thread_id)]
        answers = by_interrupt(value, pending) or {pending[0] if pending else "": value}
        for iid, answer in answers.items():
            token = answer.get("token") if isinstance(answer, dict) else None
            tokens.verify(
                key, token, thread_id=thread_id, interrupt_id=iid, user=who, now=ow.clock()
            )

    def prepare(
        thread_id: str, body: dict[str, Any], who: str
    ) -> tuple[str, Command[Any] | None, str | None]:
        """Check the request, create the thread and run as needed; (run id, command, the
        checkpoint to run from)."""
        check_run_fields(body)
        check_assistant(a_string(body, "assistant_id") or GRAPH_ID)
        metadata = an_object(body, "metadata")
        a_string(body, "if_not_exists", ("create", "reject"))
        checkpoint_id = checkpoint_in(body)
        ours = {"graph_id": GRAPH_ID, "assistant_id": ASSISTANT_ID}
        with clients.use() as ow:
            row = ow.store.threads.get(thread_id)
            if row is None and ow.store.get_run(thread_id) is None:
                if body.get("if_not_exists") != "create":
                    raise _not_found(thread_id)
                try:
                    uuid.UUID(thread_id)
                except ValueError:
                    raise HTTPException(422, f"thread_id {thread_id!r} is not a UUID") from None
                ow.store.threads.create(thread_id, who, dict(ours))
            visible(ow, thread_id, who)
            if ow.store.threads.get(thread_id) is None:
                ow.store.threads.create(thread_id, who, dict(ours))
            if thread_status(ow, thread_id) == "busy":
                raise HTTPException(
                    409, f"thread {thread_id} has a run in progress; wait for it to finish"
                )
            command: Command[Any] | None = None
            raw = body.get("command")
            if raw is not None and not isinstance(raw, dict):
                raise UsageError('command must be an object: {"resume": ...}')
            if raw:
                refuse_unknown(raw, ("resume", "update", "goto"), "command")
                if raw.get("goto"):
                    raise UsageError(
                        "command.goto is not supported: a run goes where its state routes it; "
                        "answer its question with command.resume, or cancel it"
                    )
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
                resume = raw.get("resume")
                pending = [p.interrupt_id for p in ow.pending(thread_id)]
                if resume is not None:
                    check_tokens(ow, thread_id, resume, who)
                    resume = resume_value(resume, who, pending)
                command = Command(resume=resume, update=update)
            elif ow.store.get_run(thread_id) is None:
                try:
                    start_run(ow, thread_id, body.get("input"), who)
                except StoreError:
                    if ow.store.get_run(thread_id) is None:
                        raise
                    raise HTTPException(  # two first requests raced: the other one won
                        409, f"thread {thread_id} has a run in progress; wait for it to finish"
                    ) from None
            elif body.get("input") not in (None, {}):
                raise HTTPException(
                    409,
                    f"thread {thread_id} already has a run; answer it with command.resume, "
                    "or start a new thread"
                    + (
                        " (an input at a checkpoint is not applied: edit the state there "
                        "with POST /threads/{id}/state, then run from the new checkpoint)"
                        if checkpoint_id
                        else ""
                    ),
                )
            ow.store.threads.merge_metadata(thread_id, dict(ours))  # once the run is accepted
            run_id = str(uuid.uuid4())
            ow.store.threads.add_run(run_id, thread_id, ASSISTANT_ID, metadata)
            return run_id, command, checkpoint_id

    def drive(
        thread_id: str,
        run_id: str,
        command: Command[Any] | None,
        modes: list[str],
        checkpoint_id: str | None,
        out: Feed,
        takeover: bool = False,
    ) -> None:
        graph_modes: list[StreamMode] = sorted(
            {GRAPH_MODES[m] for m in modes if m in GRAPH_MODES} | {"values"}
        )
        wanted = {GRAPH_MODES[m] for m in modes if m in GRAPH_MODES}
        status = ApiRunStatus.SUCCESS
        with clients.use() as ow:
            try:
                last: Any = None
                for mode, data in ow.stream_modes(
                    thread_id,
                    graph_modes,
                    command=command,
                    checkpoint_id=checkpoint_id,
                    takeover=takeover,
                ):
                    if mode == "values":
                        last = data
                    if mode in wanted:
                        out.put(chunk(mode, data))
                if ow.pending(thread_id):
                    status = ApiRunStatus.INTERRUPTED
                    if last is not None and "values" in wanted and "__interrupt__" not in last:
                        # A resumed drive that stops at a new question ends on a values chunk
                        # with the interrupts, as LangGraph Server's streams do.
                        snap = ow.graph.get_state(ow._config(thread_id))
                        out.put(
                            (
                                "values",
                                {
                                    **jsonable(snap.values),
                                    "__interrupt__": [jsonable(i) for i in snap.interrupts],
                                },
                            )
                        )
                else:
                    run = ow.store.get_run(thread_id)
                    if run is not None and not run.status.finished:
                        # Drained, or suspended until later: the record stays running, and
                        # recovery drives the run again once nobody holds its lease.
                        status = ApiRunStatus.RUNNING
                ow.store.wake(thread_id)
            except OnwardError as exc:
                status = ApiRunStatus.ERROR
                out.put(("error", {"error": type(exc).__name__, "message": str(exc)}))
            except Exception as exc:  # never a bare 500 mid-stream
                status = ApiRunStatus.ERROR
                out.put(("error", {"error": type(exc).__name__, "message": str(exc)[:500]}))
            finally:
                ow.store.threads.set_run_status(run_id, status)
                ow.store.threads.touch(thread_id)
                out.put(DONE)

    def launch(
        thread_id: str,
        body: dict[str, Any],
        who: str,
        modes: list[str],
        loop: asyncio.AbstractEventLoop | None,
    ) -> tuple[str, Feed]:
        pool.reserve(who)  # 429 before anything is stored
        try:
            run_id, command, checkpoint_id = prepare(thread_id, body, who)
        except BaseException:
            pool.release(who)
            raise
        out = Feed(loop)
        pool.submit(who, lambda: drive(thread_id, run_id, command, modes, checkpoint_id, out))
        return run_id, out

    def modes_of(body: dict[str, Any]) -> list[str]:
        raw = body.get("stream_mode") or "values"
        modes = [raw] if isinstance(raw, str) else raw
        if not isinstance(modes, list) or not all(isinstance(m, str) for m in modes):
            raise UsageError("stream_mode must be a mode name or a list of them")
        unknown = sorted(set(modes) - set(GRAPH_MODES))
        if unknown:
            raise UsageError(
                f"stream_mode {', '.join(unknown)} is not supported; use {', '.join(GRAPH_MODES)}"
            )
        return modes

    @app.post("/threads/{thread_id}/runs/stream")
    async def runs_stream(
        thread_id: str, body: dict[str, Any], who: str = Depends(user)
    ) -> EventSourceResponse:
        loop = asyncio.get_running_loop()
        run_id, out = await run_in_threadpool(launch, thread_id, body, who, modes_of(body), loop)

        async def events() -> AsyncIterator[dict[str, str]]:
            yield {"event": "metadata", "data": json.dumps({"run_id": run_id, "attempt": 1})}
            while True:
                item = await out.get()
                if item is DONE:
                    return
                event, data = item
                yield {"event": event, "data": json.dumps(data, ensure_ascii=False)}

        return EventSourceResponse(
            events(),
            headers={"Content-Location": f"/threads/{thread_id}/runs/{run_id}"},
            ping=15,
        )

    @app.post("/threads/{thread_id}/runs/wait")
    async def runs_wait(thread_id: str, body: dict[str, Any], who: str = Depends(user)) -> Any:
        loop = asyncio.get_running_loop()
        run_id, out = await run_in_threadpool(launch, thread_id, body, who, ["values"], loop)
        last: Any = {}
        while True:
            item = await out.get()
            if item is DONE:
                break
            event, data = item
            if event == "error":
                last = {"__error__": data}
                break
            last = data
        return JSONResponse(
            last, headers={"Content-Location": f"/threads/{thread_id}/runs/{run_id}"}
        )

    @app.post("/threads/{thread_id}/runs")
    def runs_create(thread_id: str, body: dict[str, Any], who: str = Depends(user)) -> Any:
        """A background run: returns at once; the run goes on in the server."""
        run_id, _out = launch(thread_id, body, who, [], None)
        with clients.use() as ow:
            return run_json(next(r for r in ow.store.threads.runs(thread_id) if r.run_id == run_id))

    recovery = Recovery(clients, pool, drive, enabled=recover)
    app.router.add_event_handler("startup", recovery.start)

    def run_json(r: Any) -> dict[str, Any]:
        return {
            "run_id": r.run_id,
            "thread_id": r.thread_id,
            "assistant_id": r.assistant_id,
            "created_at": r.created_at.isoformat(),
            "updated_at": r.updated_at.isoformat(),
            "status": r.status.value,
            "metadata": r.metadata,
            "multitask_strategy": "reject",
            "kwargs": {},
        }

    @app.get("/threads/{thread_id}/runs")
    def runs_list(thread_id: str, who: str = Depends(user)) -> Any:
        with clients.use() as ow:
            visible(ow, thread_id, who)
            return [run_json(r) for r in ow.store.threads.runs(thread_id)]

    @app.get("/threads/{thread_id}/runs/{run_id}")
    def runs_get(thread_id: str, run_id: str, who: str = Depends(user)) -> Any:
        with clients.use() as ow:
            visible(ow, thread_id, who)
            for r in ow.store.threads.runs(thread_id):
                if r.run_id == run_id:
                    return run_json(r)
        raise HTTPException(404, f"Run {run_id} not found")

    # -- onward's own views (the web page) ---------------------------------------

    @app.get("/onward/runs")
    def onward_runs(who: str = Depends(user)) -> Any:
        with clients.use() as ow:
            owned = {r.thread_id for r in ow.store.threads.all(who)} if api_tokens else None
            out = []
            for run in ow.store.list_runs(200):
                if owned is not None and run.thread_id not in owned:
                    continue
                out.append(
                    {
                        "thread_id": run.thread_id,
                        "objective": run.objective,
                        "status": thread_status(ow, run.thread_id)
                        if run.status is not RunStatus.DONE
                        else "done",
                        "run_status": ow.state(run.thread_id).status.value,
                        "updated_at": run.updated_at.isoformat(),
                    }
                )
            return out

    @app.get("/onward/runs/{thread_id}")
    def onward_run(thread_id: str, who: str = Depends(user)) -> Any:
        with clients.use() as ow:
            visible(ow, thread_id, who)
            key = tokens.secret()
            view = ow.get(thread_id)
            pending = [
                p.model_copy(
                    update={
                        "token": tokens.mint(
                            key, thread_id, p.interrupt_id, who, ow.clock() + tokens.ttl()
                        )
                    }
                )
                if key
                else p
                for p in ow.pending(thread_id)
            ]
            return {
                "view": view.model_dump(mode="json"),
                "pending": [p.model_dump(mode="json") for p in pending],
                "timeline": [e.model_dump(mode="json") for e in ow.timeline(thread_id)],
            }

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        return (Path(__file__).with_name("page.html")).read_text(encoding="utf-8")

    return app
