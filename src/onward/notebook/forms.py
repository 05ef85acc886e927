"""Answer a pending question from a notebook: a small ipywidgets form (the optional extra
``onward[notebook]``, imported when a form is made).

The form shows the question, its args as editable JSON and a message field, and one
button per answer the question allows. A click sends the answer through
:meth:`Onward.decide` (validated like any answer: a bad one shows its error and can be
corrected), then shows where the run stopped. Buttons are disabled once an answer
applied: a question is answered once.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from onward.errors import OnwardError, UsageError
from onward.notebook.html import question_html, text

if TYPE_CHECKING:
    from onward.client.facade import Onward
    from onward.observe.view import RunView
    from onward.people.inbox import PendingDecision

_LABELS = {
    "approve": "Approve",
    "edit": "Approve with these args",
    "reject": "Reject",
    "respond": "Send feedback",
    "retry": "Retry",
    "skip": "Skip",
    "done": "It happened (result = JSON)",
    "abort": "Abort the run",
}
_STYLES = {"approve": "success", "edit": "info", "reject": "danger", "abort": "danger"}


def _widgets() -> Any:
    try:
        import ipywidgets  # type: ignore[import-untyped]
    except ImportError:
        raise UsageError(
            "answering from a form needs ipywidgets: pip install 'onward[notebook]' "
            "(or answer with ow.approve / ow.reject / ow.decide)"
        ) from None
    return ipywidgets


def answer(action: str, question: PendingDecision, fields: str, message: str) -> dict[str, Any]:
    """The decision a click on ``action`` sends, from the form's JSON and message."""
    decision: dict[str, Any] = {"type": action}
    if action in ("edit", "done"):
        try:
            value = json.loads(fields)
        except json.JSONDecodeError as exc:
            raise UsageError(f"the args are not JSON: {exc}") from None
        if action == "edit":
            if not isinstance(value, dict):
                raise UsageError("the args must be a JSON object")
            decision["edited_action"] = {"name": question.tool, "args": value}
        else:
            decision["result"] = value
    if message.strip():
        decision["message"] = message
    return {"decisions": [decision]}


def answer_form(
    ow: Onward,
    question: PendingDecision,
    *,
    by: str | None = None,
    continue_run: bool = True,
) -> Any:
    """An ipywidgets box that answers ``question`` (see the module docstring).

    ``by``: who answers (recorded in the decision log). ``continue_run``: drive the run on
    after the answer (the default), or only record it. The box's ``result`` attribute
    holds the :class:`RunView` once an answer applied."""
    w = _widgets()
    fields = w.Textarea(
        value=json.dumps(question.args, indent=2, ensure_ascii=False),
        description="args",
        layout=w.Layout(width="100%", height="8em"),
    )
    message = w.Text(placeholder="why, or feedback", description="message")
    status = w.HTML()
    out = w.Output()
    buttons = []
    for action in question.allowed:
        button = w.Button(
            description=_LABELS.get(action, action), button_style=_STYLES.get(action, "")
        )
        button.action = action
        buttons.append(button)
    box = w.VBox([w.HTML(question_html(question)), fields, message, w.HBox(buttons), status, out])
    box.result = None

    def click(button: Any) -> None:
        try:
            sent = answer(button.action, question, fields.value, message.value)
            view: RunView = ow.decide(
                question.thread_id,
                sent,
                interrupt_id=question.interrupt_id,
                by=by,
                token=question.token,
                continue_run=continue_run,
            )
        except OnwardError as exc:
            status.value = f'<p style="color:#cf222e">{text(exc, 1000)}</p>'
            return
        for b in buttons:
            b.disabled = True
        fields.disabled = message.disabled = True
        status.value = f"<p>answered: <code>{text(button.action)}</code></p>"
        box.result = view
        with out:
            from IPython.display import display

            display(view)  # type: ignore[no-untyped-call]

    for button in buttons:
        button.on_click(click)
    return box
