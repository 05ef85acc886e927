"""A run's progress as a bar in a notebook: ``ow.run(goal, on_event=ProgressBar())``.

In a Jupyter kernel the bar is one HTML output updated in place (IPython's display
handles: nothing to install, no widget state to save). Anywhere else (a plain terminal,
a script, a CI log) it writes one short line per finished step to ``stream`` instead, so
the same code runs everywhere. IPython is imported on the first event, never before.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TextIO

from onward.notebook.html import text
from onward.observe.kinds import EventKind

if TYPE_CHECKING:
    from onward.observe.progress import ProgressEvent


def _in_kernel() -> bool:
    """Whether this process is a Jupyter kernel (IPython with a kernel attached)."""
    if "IPython" not in sys.modules:  # a kernel has imported it long before any run
        return False
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class ProgressBar:
    """An ``on_event`` callback: steps done of the plan's steps, and what happens now.

    ``done``: steps already done (a resumed run starts there). ``notebook``: force the
    notebook bar (True) or the text lines (False); by default, whichever fits."""

    def __init__(
        self, *, done: int = 0, notebook: bool | None = None, stream: TextIO | None = None
    ) -> None:
        self.done = done
        self.total: int | None = None
        self.current = "starting"
        self.finished = False
        self._notebook = notebook
        self._stream = stream
        self._handle: Any = None

    def __call__(self, event: ProgressEvent) -> None:
        kind = event.kind
        line: str | None = None
        if kind in (EventKind.PLAN_CREATED, EventKind.PLAN_REVISED):
            self.total = event.total_steps or self.total
            self.current = f"plan: {self.total or '?'} steps"
        elif kind is EventKind.STEP_STARTED:
            self.current = f"▶ {event.step_id} ({event.tool})"
        elif kind is EventKind.STEP_DONE:
            self.done += 1
            self.current = line = f"✓ {event.step_id}"
        elif kind is EventKind.STEP_FAILED:
            self.current = line = f"✗ {event.step_id}: {event.message[:80]}"
        elif kind in (EventKind.STEP_WAITING, EventKind.APPROVAL_REQUESTED):
            self.current = line = f"⏸ {event.step_id or 'plan'}: {event.message[:80]}"
        elif kind is EventKind.RUN_FINISHED:
            self.finished = True
            self.current = line = event.message or "finished"
        else:
            return
        self._show(line)

    def _show(self, line: str | None) -> None:
        notebook = self._notebook if self._notebook is not None else _in_kernel()
        if notebook:
            from IPython.display import HTML, display

            shown = HTML(self.html())  # type: ignore[no-untyped-call]
            if self._handle is None:
                self._handle = display(shown, display_id=True)  # type: ignore[no-untyped-call]
            else:
                self._handle.update(shown)
        elif line is not None:
            stream = self._stream or sys.stderr
            stream.write(f"[{self.done}/{self.total or '?'}] {line}\n")
            stream.flush()

    def html(self) -> str:
        """The bar as HTML (escaped: step ids and messages come from the run)."""
        total = self.total or 0
        pct = 100.0 * min(self.done, total) / total if total else 0.0
        colour = "#1a7f37" if self.finished else "#0969da"
        return (
            f'<div class="onward-progress" data-done="{self.done}" data-total="{total}">'
            '<div style="width:24em;max-width:100%;height:0.8em;border:1px solid #d0d7de;'
            'border-radius:4px;overflow:hidden;display:inline-block;vertical-align:middle">'
            f'<div style="width:{pct:.1f}%;height:100%;background:{colour}"></div></div> '
            f"<span>{self.done}/{total or '?'} steps</span> "
            f'<span class="onward-current">{text(self.current, 120)}</span></div>'
        )
