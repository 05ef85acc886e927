"""Helpers shared by several test modules, moved out of tests/crash/test_fencing.py: LEASE,
NO_PROXY, POSTS_APPROVED, _cli, _posts, _store_of, _until."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from onward import Onward, Plan, PlanStep, RunPolicy
from tests.support import zygote
from tests.support.common import cli_env
from tests.support.httpfake import FakeService

LEASE = {"ONWARD_LEASE_TTL": "1.0", "ONWARD_HEARTBEAT": "0.2"}
NO_PROXY = {"no_proxy": "127.0.0.1,localhost", "NO_PROXY": "127.0.0.1,localhost"}
POSTS_APPROVED = RunPolicy(auto_approve=frozenset({"http_post"}))
"""Approvals are tested in test_approvals: the POSTs here run without asking."""


def _posts(service: FakeService) -> Plan:
    """Two POSTs in a chain, without a status probe: an unknown outcome asks a person."""
    return Plan(
        steps=[
            PlanStep(
                id=f"post-{n}",
                tool="http_post",
                args={"url": service.url, "payload": {"event": f"e{n}"}},
                depends_on=[f"post-{n - 1}"] if n > 1 else [],
            )
            for n in (1, 2)
        ]
    )


def _until(done: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Wait for ``done`` (the timeout only bounds the wait)."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _store_of(db: str, thread_id: str) -> dict[str, Any]:
    """What a driver could have written for the run: its checkpoints, events, effects."""
    with Onward(db, model=None) as ow:
        config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        saved = ow.store.saver.list(config)
        checkpoints = [c.config["configurable"]["checkpoint_id"] for c in saved]
        with ow.store.db.use() as conn:
            events = conn.execute(
                "SELECT kind, detail FROM onward_events WHERE thread_id = ? ORDER BY id",
                (thread_id,),
            ).fetchall()
        ledger = ow.store.ledger.for_thread(thread_id)
        effects = [(e.step_id, e.status.value, e.calls) for e in ledger]
        return {
            "checkpoints": checkpoints,
            "events": [tuple(e) for e in events],
            "effects": effects,
        }


def _cli(db: str, cwd: Path, *args: str) -> Any:
    done = zygote.run(
        [*args, "--db", db, "--json"], cwd=cwd, env=cli_env(**LEASE, **NO_PROXY), timeout=60
    )
    return json.loads(done.stdout)
