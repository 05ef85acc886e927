"""Pending decisions: the questions runs wait on, read back from their checkpoints.

The checkpoint is the only source of truth: a question exists exactly while the
thread has a pending interrupt, so a process killed while waiting loses nothing, and
any process can list and answer it later.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from onward.model.state import WaitKind
from onward.policies.run import ExpiryAction


class PendingDecision(BaseModel):
    """One question a run waits on (what ``onward inbox --json`` prints per item)."""

    model_config = ConfigDict(frozen=True)

    thread_id: str
    interrupt_id: str
    kind: WaitKind
    step_id: str | None
    tool: str
    args: dict[str, Any]
    description: str
    allowed: list[str]
    args_hash: str
    asked_at: datetime
    remind_at: datetime
    expire_at: datetime
    on_expiry: ExpiryAction
    reason: str | None = None
    """For escalations: what onward could not decide alone."""
    key: str | None = None
    errors: list[str] = []
    """Why the previous answer could not be applied, if it could not."""
    objective: str = ""
    token: str | None = None
    """Resume token for the user who listed it (only when ONWARD_SECRET is set)."""
    batch_token: str | None = None
    """For a question of a batch: the token that answers the whole batch at once."""

    batch: list[str] = []
    """Every question asked in the same interrupt (step ids, ``plan`` for the plan), in the
    order its N decisions answer them; one entry for a lone question."""
    resolved: list[dict[str, str]] = []
    """What the step's references stand for, as it would run: ``{"arg", "from", "value"}``
    (the value as bounded JSON text); approve binds these values too."""

    def _repr_html_(self) -> str:
        """How Jupyter shows the question (args and texts escaped); answer it with
        ``onward.notebook.answer_form``."""
        from onward.notebook.html import question_html

        return question_html(self)

    @classmethod
    def of_interrupt(
        cls, thread_id: str, interrupt_id: str, value: Any, objective: str = ""
    ) -> list[PendingDecision]:
        """One per question an interrupt asks (a wave's questions are one interrupt); none
        for an interrupt that is not onward's."""
        if not isinstance(value, dict) or "onward" not in value:
            return []
        metas = value["onward"].get("questions") or [value["onward"]]
        actions = value["action_requests"]
        batch = [m.get("step_id") or "plan" for m in metas]
        return [
            cls(
                thread_id=thread_id,
                interrupt_id=interrupt_id,
                kind=WaitKind(meta["kind"]),
                step_id=meta.get("step_id"),
                tool=action["name"],
                args=action["args"],
                description=action["description"],
                allowed=meta["allowed"],
                args_hash=meta["args_hash"],
                asked_at=datetime.fromisoformat(meta["asked_at"]),
                remind_at=datetime.fromisoformat(meta["remind_at"]),
                expire_at=datetime.fromisoformat(meta["expire_at"]),
                on_expiry=ExpiryAction(meta["on_expiry"]),
                reason=meta.get("reason"),
                key=meta.get("key"),
                errors=meta.get("errors") or [],
                objective=objective,
                batch=batch,
                resolved=meta.get("resolved") or [],
            )
            for meta, action in zip(metas, actions, strict=True)
        ]


class Questions(list[PendingDecision]):
    """Questions, oldest first (``Onward.pending``, ``Onward.inbox``): a list, shown by
    Jupyter with each question's run."""

    def _repr_html_(self) -> str:
        from onward.notebook.html import questions_html

        return questions_html(self)
