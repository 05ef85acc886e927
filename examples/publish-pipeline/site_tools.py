"""The pipeline's own tool: the site's index, one entry per post (``--tools site_tools.py``)."""

from __future__ import annotations

import json
from typing import Any

import onward


@onward.tool(side_effect=onward.SideEffect.IDEMPOTENT)
def update_index(path: str, title: str, url: str, ctx: onward.ToolContext) -> dict[str, Any]:
    """Add or replace the entry for ``url`` in the JSON index at ``path``: doing it twice
    leaves one entry, so a resume after a crash may call it again."""
    index = ctx.path(path)
    entries = json.loads(index.read_text()) if index.exists() else []
    entries = [e for e in entries if e["url"] != url] + [{"title": title, "url": url}]
    index.write_text(json.dumps(entries, indent=2) + "\n")
    return {"entries": len(entries)}
