"""Which supersteps of a drive commit on their own (checkpointing/savers.py, "one durable
commit per plan step"; graph/build.py, ``REPRODUCIBLE``).

Each plan step's execute commits its writes before the run goes on. Nodes whose writes
come out the same when run again wait for the next commit: verify, the gate, and now
the plan node when it re-validates a plan the run was given, and finalize when no judge
reviews the goal. A plan the model made and a judge's review cost a model call: they
commit at once, so a crash does not lose them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from onward import Onward
from onward.checkpointing.savers import OnwardSqliteSaver, Statements
from onward.llm.fake import ScriptedChatModel
from onward.model.state import Plan, PlanStep, RunStatus

STEPS = 3


@pytest.fixture
def commits(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Each commit of the SQLite saver, as the kinds of the events in it."""
    seen: list[list[str]] = []
    real = OnwardSqliteSaver._commit_now

    def counted(self: OnwardSqliteSaver, statements: Statements, thread_id: str | None) -> None:
        deferred = [s for kept in self._deferred._by_thread.values() for s in kept]
        seen.append(
            [
                str(row[2])
                for sql, rows in [*deferred, *statements]
                if sql.split()[2] == "onward_events"
                for row in rows
            ]
        )
        real(self, statements, thread_id)

    monkeypatch.setattr(OnwardSqliteSaver, "_commit_now", counted)
    return seen


def _chain() -> Plan:
    return Plan(
        steps=[
            PlanStep(
                id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}"] if i else []
            )
            for i in range(STEPS)
        ]
    )


def test_a_declared_plan_and_an_unjudged_finish_commit_with_the_next_step(
    sqlite_url: str, workdir: Path, commits: list[list[str]]
) -> None:
    """The run's input, one commit per plan step (the first with the plan's writes), and
    the drive's end (the last verify's and finalize's writes with the run's status):
    5 commits where it took 7, every event in one of them, once."""
    with Onward(sqlite_url, model=None) as ow:
        view = ow.run(plan=_chain(), workdir=workdir)
        kinds = [e.kind for e in ow.store.events.list(view.thread_id)]
    assert view.status is RunStatus.DONE
    assert len(commits) == 1 + STEPS + 1, commits
    assert "plan_created" in commits[1]
    assert commits[1].index("plan_created") < commits[1].index("step_started")
    assert "run_finished" in commits[-1]
    assert kinds.count("plan_created") == 1
    assert kinds.count("run_finished") == 1


def test_a_plan_the_model_made_commits_before_its_first_step_runs(
    sqlite_url: str, workdir: Path, commits: list[list[str]]
) -> None:
    """The model's plan is a commit of its own: a crash after it does not ask the model
    again."""
    plan = {
        "steps": [
            {"id": "only", "tool": "noop", "args_json": json.dumps({"value": 1}), "depends_on": []}
        ]
    }
    with Onward(sqlite_url, model=ScriptedChatModel(responses=[plan])) as ow:
        view = ow.run("a goal no template knows", workdir=workdir)
    assert view.status is RunStatus.DONE
    planned = next(i for i, kinds in enumerate(commits) if "plan_created" in kinds)
    assert "step_started" not in commits[planned], commits
