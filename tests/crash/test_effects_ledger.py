"""The effect ledger, with real processes killed between an effect and its ledger record
(ONWARD_FAULT_KILL), and a user tool that counts its effects in a file."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from onward import Onward, Plan, PlanStep, ToolContext
from onward.policies.run import RunPolicy
from tests.support import zygote
from tests.support.common import cli_env

TOOLS = '''
import json
from pathlib import Path

from onward import Reconciled, SideEffect, ToolContext, tool


def _effects(ctx: ToolContext) -> Path:
    return ctx.path("effects.jsonl")


def _append(ctx: ToolContext, name: str, value: str) -> None:
    with _effects(ctx).open("a") as f:
        f.write(json.dumps({"tool": name, "key": ctx.idempotency_key, "value": value}) + "\\n")


@tool(side_effect=SideEffect.UNSAFE)
def charge(amount: int, ctx: ToolContext) -> dict:
    """An unsafe effect with no way to ask whether it happened."""
    _append(ctx, "charge", str(amount))
    return {"charged": amount}


def _probe(key: str, args: object) -> Reconciled:
    lines = [json.loads(x) for x in Path("effects.jsonl").read_text().splitlines()]
    hits = [x for x in lines if x["key"] == key]
    return Reconciled(happened=bool(hits), result={"charged": int(hits[0]["value"])}
                      if hits else None)


@tool(side_effect=SideEffect.UNSAFE, reconcile=_probe)
def charge_probed(amount: int, ctx: ToolContext) -> dict:
    """An unsafe effect whose outcome a probe can find out."""
    _append(ctx, "charge_probed", str(amount))
    return {"charged": amount}


@tool(side_effect=SideEffect.IDEMPOTENT)
def put(amount: int, ctx: ToolContext) -> dict:
    _append(ctx, "put", str(amount))
    return {"value": amount}
'''


def _plan(workdir: Path, tool: str) -> None:
    (workdir / "tools_fx.py").write_text(TOOLS, encoding="utf-8")
    (workdir / "plan.yaml").write_text(
        f"steps:\n  - {{id: first, tool: noop}}\n"
        f"  - {{id: pay, tool: {tool}, args: {{amount: 5}}, depends_on: [first]}}\n"
        f"  - {{id: after, tool: noop, depends_on: [pay]}}\n",
        encoding="utf-8",
    )


def _effects(workdir: Path) -> list[dict[str, str]]:
    path = workdir / "effects.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _crash_after_effect(workdir: Path, db: str, tool: str, fault: str = "after_effect") -> str:
    """Run the plan; the process SIGKILLs itself at ``fault`` of step 'pay'."""
    _plan(workdir, tool)
    proc = zygote.run(
        [
            "run",
            "--plan",
            "plan.yaml",
            "--tools",
            "tools_fx.py",
            "--db",
            db,
            "--thread-id",
            "t-1",
            "--auto-approve",
            tool,
        ],
        cwd=workdir,
        timeout=120,
        env=cli_env(
            ONWARD_FAULT_KILL=f"{fault}:pay", ONWARD_LEASE_TTL="0.3", ONWARD_HEARTBEAT="0.1"
        ),
    )
    assert proc.returncode == -9, proc.stderr
    assert len(_effects(workdir)) == 1  # the effect happened
    return "t-1"


def _resume(workdir: Path, db: str, thread_id: str) -> subprocess.CompletedProcess[str]:
    return zygote.run(
        ["resume", thread_id, "--takeover", "--db", db, "--json"],
        cwd=workdir,
        timeout=120,
        env=cli_env(ONWARD_LEASE_TTL="0.3", ONWARD_HEARTBEAT="0.1"),
    )


def test_unsafe_effect_with_unknown_outcome_waits_for_a_human(
    run_cli,
    workdir: Path,  # type: ignore[no-untyped-def]
    db_url: str,
) -> None:
    thread_id = _crash_after_effect(workdir, db_url, "charge")
    resumed = _resume(workdir, db_url, thread_id)
    assert resumed.returncode == 3, resumed.stderr
    status = json.loads(resumed.stdout)
    assert status["status"] == "waiting_for_human"
    [waiting] = status["waiting"]
    assert waiting["step_id"] == "pay"
    assert "outcome unknown" in waiting["reason"]
    assert waiting["key"] == _effects(workdir)[0]["key"]
    assert waiting["started_at"]
    assert len(_effects(workdir)) == 1  # not guessed: not charged again

    # The human checked: it happened. Settle it with the result, then resume.
    (workdir / "result.json").write_text('{"charged": 5}')
    settled = run_cli(
        "resolve",
        thread_id,
        "--step",
        "pay",
        "--as",
        "done",
        "--result-file",
        "result.json",
        "--reason",
        "seen in the bank statement",
        "--json",
    )
    assert settled.code == 0, settled.stderr
    decision = settled.json()["decisions"][-1]
    assert (decision["action"], decision["reason"]) == ("done", "seen in the bank statement")
    finished = _resume(workdir, db_url, thread_id)
    assert finished.returncode == 0, finished.stderr
    assert len(_effects(workdir)) == 1


def test_resolve_retry_runs_the_effect_again_once(run_cli, workdir: Path, db_url: str) -> None:  # type: ignore[no-untyped-def]
    thread_id = _crash_after_effect(workdir, db_url, "charge")
    assert _resume(workdir, db_url, thread_id).returncode == 3
    assert run_cli("resolve", thread_id, "--step", "pay", "--as", "retry").code == 0
    finished = _resume(workdir, db_url, thread_id)
    assert finished.returncode == 0, finished.stderr
    assert [e["tool"] for e in _effects(workdir)] == ["charge", "charge"]
    with Onward(db_url) as ow:
        [effect] = ow.store.ledger.for_thread(thread_id)
        assert (effect.status, effect.calls) == ("completed", 2)


def test_resolve_skip_leaves_the_step_and_its_dependants_out(
    run_cli, workdir: Path, db_url: str
) -> None:  # type: ignore[no-untyped-def]
    thread_id = _crash_after_effect(workdir, db_url, "charge")
    assert _resume(workdir, db_url, thread_id).returncode == 3
    assert run_cli("resolve", thread_id, "--step", "pay", "--as", "skip").code == 0
    finished = _resume(workdir, db_url, thread_id)
    assert finished.returncode == 0, finished.stderr
    steps = {s["id"]: s["status"] for s in json.loads(finished.stdout)["steps"]}
    assert steps == {"first": "done", "pay": "skipped", "after": "skipped"}


def test_reconcile_settles_an_unknown_outcome_without_a_human(workdir: Path, db_url: str) -> None:
    thread_id = _crash_after_effect(workdir, db_url, "charge_probed")
    finished = _resume(workdir, db_url, thread_id)
    assert finished.returncode == 0, finished.stderr
    assert len(_effects(workdir)) == 1  # the probe found it; no second charge
    with Onward(db_url) as ow:
        [effect] = ow.store.ledger.for_thread(thread_id)
        assert effect.result == {"charged": 5}


def test_idempotent_effect_is_called_again_with_the_same_key(workdir: Path, db_url: str) -> None:
    thread_id = _crash_after_effect(workdir, db_url, "put")
    finished = _resume(workdir, db_url, thread_id)
    assert finished.returncode == 0, finished.stderr
    keys = [e["key"] for e in _effects(workdir)]
    assert len(keys) == 2
    assert keys[0] == keys[1]


def test_completed_effect_is_replayed_from_the_ledger_not_called(
    workdir: Path, db_url: str
) -> None:
    """Killed after the ledger recorded the effect but before the checkpoint: the step
    re-runs and gets the recorded result instead of a second effect."""
    thread_id = _crash_after_effect(workdir, db_url, "charge", fault="after_record")
    with Onward(db_url) as ow:
        assert ow.state(thread_id).status_of("pay") == "pending"  # no checkpoint saw it
    finished = _resume(workdir, db_url, thread_id)
    assert finished.returncode == 0, finished.stderr
    assert len(_effects(workdir)) == 1
    with Onward(db_url) as ow:
        [effect] = ow.store.ledger.for_thread(thread_id)
        assert (effect.status, effect.calls) == ("completed", 1)
        assert ow.state(thread_id).record("pay").effect_key == effect.key


def test_resolve_of_a_step_that_is_not_waiting_is_refused(run_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    _plan(workdir, "put")
    done = run_cli(
        "run", "--plan", "plan.yaml", "--tools", "tools_fx.py", "--json", "--auto-approve", "charge"
    )
    assert done.code == 0, done.stderr
    refused = run_cli("resolve", done.json()["thread_id"], "--step", "pay", "--as", "done")
    assert refused.code == 2
    assert "is not waiting for a decision" in refused.stderr


@pytest.mark.parametrize("tool", ["charge", "put"])
def test_effect_key_is_in_the_tool_context_and_on_the_step(
    run_cli,
    workdir: Path,  # type: ignore[no-untyped-def]
    tool: str,
) -> None:
    _plan(workdir, tool)
    done = run_cli(
        "run", "--plan", "plan.yaml", "--tools", "tools_fx.py", "--json", "--auto-approve", "charge"
    )
    assert done.code == 0, done.stderr
    [effect] = _effects(workdir)
    assert effect["key"]
    assert len(effect["key"]) == 64


def test_an_effects_compensation_is_recorded_with_it(workdir: Path, db_url: str) -> None:
    from onward import Registry, SideEffect, tool

    registry = Registry()

    def undo(key: str, args: object, result: object) -> None:
        """Would refund; here only its presence matters."""

    @tool(side_effect=SideEffect.UNSAFE, compensate=undo, registry=registry)
    def refundable(amount: int, ctx: ToolContext) -> dict[str, int]:
        return {"charged": amount}

    @tool(side_effect=SideEffect.IDEMPOTENT, registry=registry)
    def plain(amount: int, ctx: ToolContext) -> dict[str, int]:
        return {"value": amount}

    plan = Plan(
        steps=[
            PlanStep(id="a", tool="refundable", args={"amount": 1}),
            PlanStep(id="b", tool="plain", args={"amount": 2}),
        ]
    )
    with Onward(db_url, registry=registry) as ow:
        view = ow.run(
            plan=plan, workdir=workdir, policy=RunPolicy(auto_approve=frozenset({"refundable"}))
        )
        assert view.status == "done"
        effects = {e.step_id: e.compensable for e in ow.store.ledger.for_thread(view.thread_id)}
    assert effects == {"a": True, "b": False}
