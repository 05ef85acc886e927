"""http_get: read a URL, only on hosts the run's environment allows (ONWARD_HTTP_ALLOW)."""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from onward.errors import DeterministicToolError, TransientToolError
from onward.tools.registry import tool


def _allowed_hosts() -> set[str]:
    return {
        h.strip().lower() for h in os.environ.get("ONWARD_HTTP_ALLOW", "").split(",") if h.strip()
    }


def _host(args: dict[str, Any]) -> str | None:
    return urllib.parse.urlsplit(str(args.get("url", ""))).netloc or None


@tool(service=_host, timeout=60)
def http_get(url: str, max_bytes: int = 200_000, timeout: float = 20.0) -> dict[str, Any]:
    """GET a URL on an allowlisted host (ONWARD_HTTP_ALLOW=host[:port],...); 429/5xx and
    network errors are transient."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DeterministicToolError(f"{url!r} is not an http(s) URL")
    allowed = _allowed_hosts()
    if parts.netloc.lower() not in allowed and parts.hostname.lower() not in allowed:
        raise DeterministicToolError(
            f"host {parts.netloc} is not allowed",
            hint="add it to ONWARD_HTTP_ALLOW (comma-separated hosts) if the run may read it",
        )
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data = response.read(max_bytes + 1)
            status, ctype = int(response.status), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as err:
        if err.code == 429 or err.code >= 500:
            raise TransientToolError(f"GET {url} answered {err.code}") from None
        raise DeterministicToolError(f"GET {url} answered {err.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise TransientToolError(f"GET {url} failed: {exc}") from None
    return {
        "url": url,
        "status": status,
        "content_type": ctype,
        "text": data[:max_bytes].decode("utf-8", errors="replace"),
        "truncated": len(data) > max_bytes,
    }
