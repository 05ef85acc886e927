"""The web page, and the views of onward runs it reads (with resume tokens to answer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from onward.client.deciding import with_tokens
from onward.model.state import RunStatus
from onward.people import resume_tokens
from onward.serve.context import Ctx, Who
from onward.serve.strict import StrictRoute
from onward.serve.views import thread_status, visible

router = APIRouter(route_class=StrictRoute)
PAGE = Path(__file__).parent.parent / "page.html"


@router.get("/onward/runs")
def onward_runs(ctx: Ctx, who: Who) -> Any:
    with ctx.clients.use() as ow:
        owned = {r.thread_id for r in ow.store.threads.all(who)} if ctx.tokens else None
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
                    "run_status": ow.get(run.thread_id).status.value,
                    "updated_at": run.updated_at.isoformat(),
                }
            )
        return out


@router.get("/onward/runs/{thread_id}")
def onward_run(thread_id: str, ctx: Ctx, who: Who) -> Any:
    with ctx.clients.use() as ow:
        visible(ow, thread_id, who, ctx.tokens)
        key = resume_tokens.secret()
        view = ow.get(thread_id)
        pending = with_tokens(ow, ow.pending(thread_id), who) if key else ow.pending(thread_id)
        return {
            "view": view.model_dump(mode="json"),
            "pending": [p.model_dump(mode="json") for p in pending],
            "timeline": [e.model_dump(mode="json") for e in ow.timeline(thread_id)],
        }


@router.get("/", response_class=HTMLResponse)
def page() -> str:
    return PAGE.read_text(encoding="utf-8")
