"""http_get: read a URL, only on hosts the run's environment allows (ONWARD_HTTP_ALLOW),
through the one egress policy (:mod:`onward.policies.egress`: redirects are re-checked hop
by hop)."""

from __future__ import annotations

from typing import Any

from onward.errors import DeterministicToolError, TransientToolError
from onward.policies import egress
from onward.tools.registry import tool


@tool(service=egress.service_of, timeout=60)
def http_get(url: str, max_bytes: int = 200_000, timeout: float = 20.0) -> dict[str, Any]:
    """GET a URL on an allowlisted host (ONWARD_HTTP_ALLOW=host[:port],...), following
    redirects only to allowlisted hosts; 429/5xx and network errors are transient."""
    answer = egress.request("GET", url, timeout=timeout, max_bytes=max_bytes)
    if answer.status == 429 or answer.status >= 500:
        raise TransientToolError(f"GET {url} answered {answer.status}")
    if not 200 <= answer.status < 300:
        raise DeterministicToolError(f"GET {url} answered {answer.status}")
    return {
        "url": url,
        "status": answer.status,
        "content_type": answer.content_type,
        "text": answer.body.decode("utf-8", errors="replace"),
        "truncated": answer.truncated,
    }
