"""The graph as a Mermaid diagram that Jupyter draws inline (no network, no renderer to
paste into): JupyterLab 4.1+ and the docs site render a Markdown output's
```` ```mermaid ```` block."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Diagram:
    """Mermaid text; shown in a notebook as the drawn graph, printed as the text."""

    mermaid: str

    def _repr_markdown_(self) -> str:
        return f"```mermaid\n{self.mermaid.strip()}\n```\n"

    def __str__(self) -> str:
        return self.mermaid
