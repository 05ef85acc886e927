"""The notebooks are published executed: each committed notebook holds the outputs of a
run of all its cells, in order and without an error, and its docs page
(docs/notebooks/NAME.md) is its rendering. CI executes the notebooks afresh too
(``--nbmake``); ``python notebooks/publish.py`` re-executes and re-renders them."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import nbformat
import pytest

from tests.support.paths import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def publisher() -> ModuleType:
    spec = importlib.util.spec_from_file_location("publish", ROOT / "notebooks" / "publish.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_are_notebooks() -> None:
    assert len(NOTEBOOKS) >= 4


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_a_committed_notebook_was_executed_in_order(notebook: Path) -> None:
    nb = nbformat.read(notebook, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), (
        f"{notebook.name} was not executed top to bottom: run python notebooks/publish.py"
    )
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors
    rich = [o for c in code for o in c.outputs if "text/html" in o.get("data", {})]
    assert rich, "the notebooks show onward's views, not prints"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_each_notebook_is_published_as_its_docs_page(notebook: Path) -> None:
    publish = publisher()
    page = publish.page_of(notebook)
    assert page.exists(), f"{page} is missing: run python notebooks/publish.py --render"
    assert page.read_text(encoding="utf-8") == publish.render(notebook), (
        f"{page.name} is not {notebook.name}'s rendering: run python notebooks/publish.py"
    )


def test_a_page_shows_views_as_html_graphs_as_mermaid_and_code_unrun() -> None:
    page = (ROOT / "docs" / "notebooks" / "01_quickstart.md").read_text(encoding="utf-8")
    assert '<div class="onward-run"' in page
    assert '<div class="onward-summary"' in page
    assert "```mermaid\n" in page
    assert "```python" not in page  # tests/docs/test_docs.py would run each cell alone
