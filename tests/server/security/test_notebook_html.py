"""Run data is untrusted: what tools return, what they fail with, a goal's text and a
question's args may hold markup. A notebook shows them as text: the HTML of a run, a
step, a question, a timeline, a summary and the progress bar has no element or attribute
that the data brought (no script, no image, no event handler), only its escaped text."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from onward import (
    DeterministicToolError,
    EventKind,
    Onward,
    Plan,
    PlanStep,
    ProgressEvent,
    ToolContext,
    tool,
)
from onward.notebook import ProgressBar

SCRIPT = "<script>alert(1)</script>"
IMAGE = '"><img src=x onerror=alert(2)>'
ALLOWED = {"div", "p", "strong", "em", "code", "span", "pre", "table", "thead", "tbody", "tr"}
ALLOWED |= {"th", "td", "br", "ul", "li"}


@tool
def hostile_output(ctx: ToolContext) -> dict[str, Any]:
    """Returns markup, as a page a tool fetched might."""
    return {"title": SCRIPT, "alt": IMAGE}


@tool
def hostile_failure(text: str, ctx: ToolContext) -> dict[str, Any]:
    """Fails with markup in its message."""
    raise DeterministicToolError(f"cannot parse {SCRIPT} {text}")


class Elements(HTMLParser):
    """Every element and attribute of a page, and its text."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, str | None]] = []
        self.text = ""
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs += attrs

    def handle_data(self, data: str) -> None:
        self.text += data


def assert_inert(markup: str, *shown: str) -> None:
    page = Elements(markup)
    assert page.tags <= ALLOWED, page.tags - ALLOWED
    assert not [name for name, _ in page.attrs if name.startswith("on") or name == "src"]
    assert "<script" not in markup.lower()
    assert "<img" not in markup.lower()
    for text in shown:  # the data is there, as text
        assert text in page.text, (text, page.text[:500])


def test_markup_in_run_data_is_shown_as_text(db_url: str, workdir: Path) -> None:
    plan = Plan(
        steps=[
            PlanStep(id="fetch", tool="hostile_output", output="page"),
            PlanStep(
                id="parse", tool="hostile_failure", args={"text": IMAGE}, depends_on=["fetch"]
            ),
        ]
    )
    bar = ProgressBar(stream=open(workdir / "progress.txt", "w"))  # noqa: SIM115
    with Onward(db_url, model=None) as ow:
        view = ow.run(f"read {SCRIPT}", plan=plan, workdir=workdir, on_event=bar)
        timeline = ow.timeline(view.thread_id)
        summary = ow.summary(view.thread_id)
    (question,) = view.pending

    assert_inert(view._repr_html_(), f"read {SCRIPT}", SCRIPT, IMAGE)
    for step in view.steps:  # an output's summary is cut short, so only its start
        assert_inert(step._repr_html_(), SCRIPT[:20])
    assert_inert(question._repr_html_(), SCRIPT, IMAGE)
    assert_inert(timeline._repr_html_(), SCRIPT)
    assert_inert(summary._repr_html_())
    assert_inert(bar.html())
    bar(ProgressEvent(kind=EventKind.STEP_FAILED, step_id="parse", message=SCRIPT))
    assert_inert(bar.html(), SCRIPT)
