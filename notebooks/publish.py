"""Execute the notebooks in place (outputs kept in the committed files) and render each into
a docs page, ``docs/notebooks/NAME.md``, with its outputs: text as text, the rich views
as their HTML, Markdown (the Mermaid graph) as Markdown.

    python notebooks/publish.py           # execute every notebook, then write the pages
    python notebooks/publish.py --render  # only write the pages from the saved outputs

CI executes the notebooks afresh (``--nbmake``); tests/docs/test_notebook_docs.py checks that
the committed notebooks were executed and that each page is its notebook's rendering.
The code on the pages is fenced ``py``, not ``python``: tests/docs/test_docs.py runs every
``python`` block of the docs alone, and a notebook's cells only run in order, in one
kernel (which nbmake does).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PAGES = ROOT / "docs" / "notebooks"
WIDGET = "application/vnd.jupyter.widget-view+json"


def page_of(notebook: Path) -> Path:
    return PAGES / f"{notebook.stem}.md"


def execute(notebook: Path) -> None:
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={}).execute()
    nb.metadata.pop("widgets", None)  # widget state: large, and useless without a kernel
    nbformat.write(nb, notebook)


def fence(lang: str, body: str) -> str:
    body = body.rstrip("\n")
    ticks = "````" if "```" in body else "```"
    return f"{ticks}{lang}\n{body}\n{ticks}\n"


def output(out: Any) -> str:
    kind = out["output_type"]
    if kind == "stream":
        return fence("text", out["text"])
    if kind == "error":
        raise SystemExit(f"a notebook's saved output is an error: {out['ename']}")
    data = out.get("data", {})
    if WIDGET in data:
        return (
            '!!! note "A form"\n    An ipywidgets form is shown here; open the notebook in '
            "Jupyter to use it.\n"
        )
    if "text/html" in data:
        # One raw HTML block: blank lines inside would end it early.
        html = "\n".join(line for line in "".join(data["text/html"]).splitlines() if line.strip())
        return f'<div class="onward-output" markdown="0">\n{html}\n</div>\n'
    if "text/markdown" in data:
        return flat("".join(data["text/markdown"])).rstrip("\n") + "\n"
    if "text/plain" in data:
        return fence("text", "".join(data["text/plain"]))
    return ""


def flat(markdown: str) -> str:
    """An output's Markdown with its headings made bold lines: on the page they are a
    report's headings, not the page's (they stay out of its table of contents)."""
    out, in_fence = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        heading = re.match(r"#{1,6} +(.*)", line)
        out.append(f"**{heading.group(1).strip()}**" if heading and not in_fence else line)
    return "\n".join(out) + "\n"


def render(notebook: Path) -> str:
    nb = nbformat.read(notebook, as_version=4)
    name = notebook.relative_to(ROOT).as_posix()
    parts = [
        f"<!-- Made by notebooks/publish.py from {name}; edit the notebook, not this page. -->\n"
    ]
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            parts.append(cell.source.rstrip("\n") + "\n")
            if len(parts) == 2:  # after the title: where the page comes from
                parts.append(
                    f"*`{name}` as it ran, outputs included; CI runs it on each change.*\n"
                )
        elif cell.cell_type == "code":
            parts.append(fence("py", cell.source))
            parts.extend(o for o in map(output, cell.get("outputs", [])) if o)
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    PAGES.mkdir(parents=True, exist_ok=True)
    for notebook in NOTEBOOKS:
        if "--render" not in argv:
            execute(notebook)
        page_of(notebook).write_text(render(notebook), encoding="utf-8")
        print(f"{notebook.relative_to(ROOT)} -> {page_of(notebook).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
