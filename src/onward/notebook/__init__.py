"""onward in Jupyter: rich views, the graph drawn inline, a progress bar, answer forms.

Runs, steps, questions, timelines and summaries show themselves as HTML tables in a
notebook (their ``_repr_html_``, see :mod:`onward.notebook.html`); nothing here is needed
for that, and nothing here reads a run: what it shows is what ``Onward.get``,
``Onward.pending`` and ``Onward.inbox`` read (onward.observe.reading, the one reader).
This package adds what a notebook does with them:

- :class:`Diagram` (``ow.diagram()``, ``ow.diagram(flow=True)`` for the flow view): the graph
  as Mermaid in a Markdown output, drawn by JupyterLab offline;
- :class:`ProgressBar`: an ``on_event`` callback that shows a run's progress as one
  output updated in place (a line per step outside a notebook);
- :func:`answer_form`: a small ipywidgets form to answer a pending question (the optional
  extra ``onward[notebook]``).

Importing it imports neither IPython nor ipywidgets; they load when first used.
"""

from onward.notebook.diagram import Diagram
from onward.notebook.forms import answer_form
from onward.notebook.progress import ProgressBar

__all__ = ["Diagram", "ProgressBar", "answer_form"]
