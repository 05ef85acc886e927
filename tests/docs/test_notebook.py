"""onward in a notebook: runs, steps, questions, timelines and summaries show as HTML; the
graph as a Mermaid block; progress as a bar (text lines outside a kernel); a question is
answered from an ipywidgets form. The HTML is parsed and its content asserted, never
compared byte for byte."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from onward import Onward, Plan, PlanStep, RunStatus, RunView
from onward.notebook import Diagram, ProgressBar, answer_form
from onward.notebook import html as nb_html
from onward.people.inbox import Questions
from tests.support.common import cli_env
from tests.support.hitl_tools import rows
from tests.support.paths import SUPPORT

TOOLS = [str(SUPPORT / n) for n in ("failure_tools.py", "hitl_tools.py")]


class Node:
    """One parsed element: tag, attributes, children and the text directly in it."""

    def __init__(self, tag: str, attrs: dict[str, str | None]) -> None:
        self.tag, self.attrs = tag, attrs
        self.children: list[Node] = []
        self.content: list[Node | str] = []  # text and children, in document order

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.content)

    def all(self, tag: str | None = None, **attrs: str) -> Iterator[Node]:
        for c in self.children:
            if (tag is None or c.tag == tag) and all(c.attrs.get(k) == v for k, v in attrs.items()):
                yield c
            yield from c.all(tag, **attrs)

    def one(self, tag: str | None = None, **attrs: str) -> Node:
        found = list(self.all(tag, **attrs))
        assert len(found) == 1, (tag, attrs, len(found))
        return found[0]


VOID = {"br", "img", "hr", "input", "meta", "link"}


class Tree(HTMLParser):
    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("root", {})
        self.stack = [self.root]
        self.feed(markup)
        self.close()
        assert self.stack == [self.root], "unclosed elements"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs))
        self.stack[-1].children.append(node)
        self.stack[-1].content.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].content.append(data)


def parse(markup: str) -> Node:
    return Tree(markup).root


@pytest.fixture
def mixed_run(db_url: str, workdir: Path) -> Iterator[tuple[Onward, RunView]]:
    """A run that stopped with a finished step, a failed one (a bug: with no model to fix
    it, its question waits) and one not started."""
    plan = Plan(
        steps=[
            PlanStep(id="fine", tool="noop", args={"value": 3}, output="fine"),
            PlanStep(id="broken", tool="always_value_error", args={"x": 7}),
            PlanStep(id="pay", tool="pay", args={"amount": 5, "to": "bo"}, depends_on=["fine"]),
        ]
    )
    with Onward(db_url, tool_modules=TOOLS, model=None) as ow:
        view = ow.run("three kinds of step", plan=plan, workdir=workdir)
        yield ow, view


def test_a_run_shows_its_finished_failed_and_waiting_steps_and_its_questions(
    mixed_run: tuple[Onward, RunView],
) -> None:
    _ow, view = mixed_run
    assert view.status is RunStatus.WAITING_FOR_HUMAN
    tree = parse(view._repr_html_())
    run = tree.one("div", **{"class": "onward-run"})
    assert run.attrs["data-thread-id"] == view.thread_id
    assert run.attrs["data-status"] == "waiting_for_human"
    assert run.one("p", **{"class": "onward-objective"}).text() == "three kinds of step"

    by_step = {tr.attrs["data-step"]: tr for tr in run.all("tr") if "data-step" in tr.attrs}
    assert list(by_step) == ["fine", "broken", "pay"]
    cells = {k: [td.text() for td in tr.all("td")] for k, tr in by_step.items()}
    assert cells["fine"][:4] == ["fine", "noop", "done", "1"]
    fine_output = view.steps[0].output
    assert fine_output is not None
    assert cells["fine"][4] == fine_output.summary
    assert by_step["broken"].attrs["data-status"] == "failed"
    assert cells["broken"][4].startswith("deterministic: ")
    assert "cannot handle x=7" in cells["broken"][4]
    assert by_step["pay"].attrs["data-status"] == "pending"

    (question,) = run.all("div", **{"class": "onward-question"})
    (pending,) = view.pending
    assert question.attrs["data-interrupt-id"] == pending.interrupt_id
    assert question.attrs["data-kind"] == "escalation"
    assert '"x": 7' in question.one("pre").text()
    assert "cannot handle x=7" in question.one("p", **{"class": "onward-reason"}).text()
    # The tally counts every step by status, without building the views one by one.
    assert view.step_counts() == {"pending": 1, "done": 1, "failed": 1}
    assert "1 done" in run.text()
    assert "1 failed" in run.text()


def test_a_step_a_question_a_timeline_and_a_summary_show_as_tables(
    mixed_run: tuple[Onward, RunView],
) -> None:
    ow, view = mixed_run
    broken = next(s for s in view.steps if s.id == "broken")
    step = parse(broken._repr_html_()).one("div", **{"class": "onward-step"})
    fields = {
        tr.attrs["data-field"]: [td.text() for td in tr.all("td")][1] for tr in step.all("tr")
    }
    assert fields["status"] == "failed"
    assert fields["failure 1"].startswith("deterministic (attempt 1): ")

    (question,) = view.pending
    shown = parse(question._repr_html_()).one("div", **{"class": "onward-question"})
    assert [c.text() for c in shown.all("code")][:2] == ["broken", "always_value_error"]
    answers = [c.text() for c in shown.all("code")][2:]
    assert answers == question.allowed
    assert "retry" in answers

    events = ow.timeline(view.thread_id)
    table = parse(events._repr_html_()).one("div", **{"class": "onward-timeline"})
    kinds = [tr.attrs["data-kind"] for tr in table.all("tr") if "data-kind" in tr.attrs]
    assert kinds == [e.kind for e in events][: nb_html.MAX_ROWS]
    assert "step_failed" in kinds
    assert "step_done" in kinds

    summary = ow.summary(view.thread_id)
    numbers = parse(summary._repr_html_()).one("div", **{"class": "onward-summary"})
    values = {
        tr.attrs["data-field"]: [td.text() for td in tr.all("td")][1] for tr in numbers.all("tr")
    }
    assert values["steps done"] == f"{summary.steps_done} of 3" == "1 of 3"
    assert values["failures"] == "deterministic: 1"
    assert values["status"] == summary.status


def test_an_inbox_shows_each_question_under_its_run(
    mixed_run: tuple[Onward, RunView],
) -> None:
    ow, view = mixed_run
    inbox = ow.inbox()
    assert inbox == view.pending
    shown = parse(inbox._repr_html_()).one("div", **{"class": "onward-questions"})
    (run,) = shown.all("p", **{"class": "onward-question-run"})
    assert run.text() == f"run {view.thread_id}: three kinds of step"
    (question,) = shown.all("div", **{"class": "onward-question"})
    assert question.attrs["data-interrupt-id"] == view.pending[0].interrupt_id
    assert "no question is waiting" in parse(Questions()._repr_html_()).text()


def test_a_long_run_shows_its_first_rows_and_counts_the_rest(db_url: str, workdir: Path) -> None:
    steps = [
        PlanStep(id=f"s{i}", tool="noop", args={"value": i}) for i in range(nb_html.MAX_ROWS + 7)
    ]
    with Onward(db_url, model=None) as ow:
        view = ow.run("many", plan=Plan(steps=steps), workdir=workdir, max_concurrency=8)
    run = parse(view._repr_html_())
    assert len([tr for tr in run.all("tr") if "data-step" in tr.attrs]) == nb_html.MAX_ROWS
    assert "… and 7 more" in run.text()
    assert view.step_counts() == {"done": nb_html.MAX_ROWS + 7}


def test_a_run_paused_before_a_node_says_where(db_url: str, workdir: Path) -> None:
    plan = Plan(steps=[PlanStep(id="a", tool="noop")])
    with Onward(db_url, model=None) as ow:
        view = ow.run("step through", plan=plan, workdir=workdir, interrupt_before=["verify"])
    run = parse(view._repr_html_())
    assert view.paused_before == ["verify"]
    assert "paused before verify; a resume goes on" in run.text()


def test_the_graph_is_a_mermaid_block(db_url: str) -> None:
    with Onward(db_url, model=None) as ow:
        diagram = ow.diagram()
    assert isinstance(diagram, Diagram)
    markdown = diagram._repr_markdown_()
    assert markdown.startswith("```mermaid\n")
    assert markdown.endswith("```\n")
    assert "execute" in markdown
    assert "approve" in markdown
    assert str(diagram) == diagram.mermaid in markdown


def test_progress_outside_a_kernel_is_one_line_per_step(db_url: str, workdir: Path) -> None:
    plan = Plan(
        steps=[PlanStep(id="a", tool="noop"), PlanStep(id="b", tool="noop", depends_on=["a"])]
    )
    out = io.StringIO()
    bar = ProgressBar(stream=out)
    with Onward(db_url, model=None) as ow:
        ow.run("two", plan=plan, workdir=workdir, on_event=bar)
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["[1/2] ✓ a", "[2/2] ✓ b"]
    assert lines[-1].startswith("[2/2] ")
    assert bar.finished
    assert bar.done == 2
    bar_html = parse(bar.html()).one("div", **{"class": "onward-progress"})
    assert (bar_html.attrs["data-done"], bar_html.attrs["data-total"]) == ("2", "2")


def test_progress_in_a_kernel_updates_one_display(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a notebook the bar is one output (a display handle) updated in place."""
    shown: list[tuple[str, str]] = []

    class Handle:
        def update(self, obj: Any) -> None:
            shown.append(("update", obj.data))

    def display(obj: Any, display_id: bool = False) -> Handle:
        assert display_id
        shown.append(("display", obj.data))
        return Handle()

    import IPython.display

    monkeypatch.setattr(IPython.display, "display", display)
    plan = Plan(
        steps=[PlanStep(id="a", tool="noop"), PlanStep(id="b", tool="noop", depends_on=["a"])]
    )
    with Onward(db_url, model=None) as ow:
        ow.run("two", plan=plan, workdir=workdir, on_event=ProgressBar(notebook=True))
    assert [k for k, _ in shown].count("display") == 1
    assert shown[0][0] == "display"
    assert len(shown) > 2
    last = parse(shown[-1][1]).one("div", **{"class": "onward-progress"})
    assert (last.attrs["data-done"], last.attrs["data-total"]) == ("2", "2")


def test_a_question_is_answered_from_the_form(db_url: str, workdir: Path) -> None:
    plan = Plan(steps=[PlanStep(id="pay", tool="pay", args={"amount": 40, "to": "bo"})])
    with Onward(db_url, tool_modules=TOOLS, model=None) as ow:
        view = ow.run("pay bo", plan=plan, workdir=workdir)
        (question,) = view.pending
        form = answer_form(ow, question, by="ann")
        buttons = {b.action: b for b in form.children[3].children}
        assert list(buttons) == question.allowed
        form.children[1].value = "not json"
        buttons["edit"].click()
        assert "not JSON" in form.children[4].value
        assert form.result is None
        assert rows(workdir, "payments.jsonl") == []
        form.children[1].value = '{"amount": 35, "to": "bo"}'
        buttons["edit"].click()
        assert form.result is not None
        assert form.result.status is RunStatus.DONE
        assert all(b.disabled for b in buttons.values())
        (decision,) = ow.state(view.thread_id).decisions
    assert [r["amount"] for r in rows(workdir, "payments.jsonl")] == [35]
    assert decision.by == "ann"


def test_the_form_says_what_to_install_without_ipywidgets(
    mixed_run: tuple[Onward, RunView], monkeypatch: pytest.MonkeyPatch
) -> None:
    from onward.errors import UsageError

    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # an import of it fails
    ow, view = mixed_run
    with pytest.raises(UsageError, match=r"pip install 'onward\[notebook\]'"):
        answer_form(ow, view.pending[0])


def test_importing_the_notebook_helpers_loads_no_ipython(tmp_path: Path) -> None:
    code = (
        "import sys, onward.notebook; print('IPython' in sys.modules, 'ipywidgets' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=cli_env(),
        check=True,
    )
    assert proc.stdout.split() == ["False", "False"]
