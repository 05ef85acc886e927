"""Built-in tools with effects outside the work directory's artifacts: notify, http_post.

Both take their idempotency key from ``ctx.idempotency_key`` (the effect ledger sets it for
non-pure tools). ``notify`` is idempotent by construction: one outbox line per key.
``http_post`` is unsafe (the server may ignore ``Idempotency-Key``); after a crash the ledger
asks :func:`reconcile_http_post` whether the interrupted POST arrived. The two reach the
network only through :mod:`onward.policies.egress` (hosts in ONWARD_HTTP_ALLOW).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.parse
from typing import Any

from onward.errors import DeterministicToolError, TransientToolError
from onward.model.state import SideEffect, utcnow
from onward.policies import egress
from onward.store.artifacts import fsync_enabled
from onward.tools.registry import Reconciled, ToolContext, tool

BODY_EXCERPT = 500
"""Characters of a response body quoted in error messages."""


def _require_key(ctx: ToolContext, tool_name: str) -> str:
    if ctx.idempotency_key is None:
        raise DeterministicToolError(
            f"{tool_name} needs an idempotency key (ctx.idempotency_key is None)",
            hint="run it through onward's execute node, or pass "
            "ToolContext(idempotency_key=...) when calling it directly",
        )
    return ctx.idempotency_key


# --------------------------------------------------------------------------- notify


def _lock(fd: int) -> None:
    # Scan-then-append must be one critical section, or two writers (parallel steps, or a
    # retry racing a zombie worker) could both miss the key and both append it. The lock
    # is released when the fd is closed.
    if sys.platform != "win32":
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)


def _find_key(data: bytes, key: str) -> int | None:
    """1-based line number of the first record with ``key``; unparseable lines (a torn
    tail left by a crash mid-write) are skipped, not fatal."""
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:  # JSONDecodeError and UnicodeDecodeError both
            continue
        if isinstance(record, dict) and record.get("key") == key:
            return number
    return None


@tool(side_effect=SideEffect.IDEMPOTENT)
def notify(outbox: str, message: str, ctx: ToolContext, channel: str = "default") -> dict[str, Any]:
    """Append one JSON line {key, channel, message, at} to an outbox file, once per key.
    A second call with the key appends nothing and returns what the first one returned."""
    key = _require_key(ctx, "notify")
    path = ctx.path(outbox)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        _lock(fd)
        data = path.read_bytes()
        found = _find_key(data, key)
        if found is not None:  # a re-call (after a crash): the result the first call gave
            return {"outbox": outbox, "key": key, "line": found}
        record = {"key": key, "channel": channel, "message": message, "at": utcnow().isoformat()}
        line = json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n"
        torn = bool(data) and not data.endswith(b"\n")
        if torn:
            # Terminate the torn tail first, or our record would be glued onto it and
            # become unparseable too. Same write: a crash cannot split the two.
            line = b"\n" + line
        lines_before = data.count(b"\n") + (1 if torn else 0)
        # One write on an O_APPEND fd: the line lands whole at the end, or (crash, disk
        # full) as a torn tail that later scans skip.
        written = os.write(fd, line)
        if written != len(line):
            raise TransientToolError(
                f"short write to outbox {outbox} ({written} of {len(line)} bytes); "
                "the partial line is ignored by later scans, retry"
            )
        if fsync_enabled():
            os.fsync(fd)
    finally:
        os.close(fd)
    return {"outbox": outbox, "key": key, "line": lines_before + 1}


# --------------------------------------------------------------------------- http_post


def _decode(raw: bytes) -> Any:
    """Parsed JSON if the body is JSON, else its text."""
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def _excerpt(body: Any) -> str:
    text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    return text if len(text) <= BODY_EXCERPT else text[: BODY_EXCERPT - 1] + "…"


def _with_query(url: str, **params: str) -> str:
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    query += list(params.items())
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def reconcile_http_post(key: str, args: Any) -> Reconciled:
    """Ask ``args.status_url?key=KEY`` whether an interrupted POST arrived.

    200 ``{"received": true, "response": {"status": S, "body": B}}``: it happened, and the
    step's result is the response the POST got, as in a run without the crash (a later
    step may read ``${x.body...}``). ``{"received": false}`` (200 or 404): it did not.
    Anything else raises: onward cannot tell, or cannot give the step its result, so a
    human decides.
    """
    status_url: str | None = args.status_url
    if status_url is None:
        raise DeterministicToolError(
            f"cannot tell whether POST {args.url} with Idempotency-Key {key} happened: "
            "the step has no status_url to ask",
            hint="check the receiving service, then mark the effect as done or not; "
            "give http_post a status_url so onward can check by itself next time",
        )
    probe = _with_query(status_url, key=key)
    try:
        answer = egress.request("GET", probe, timeout=args.timeout)
    except DeterministicToolError as refused:  # the egress policy, or a malformed URL
        raise DeterministicToolError(
            f"cannot tell whether POST {args.url} with Idempotency-Key {key} happened: "
            f"status_url: {refused}",
            hint=f"{refused.hint}; or check the receiving service, then mark the effect as "
            "done or not",
        ) from None
    except TransientToolError as failed:
        raise TransientToolError(
            f"cannot tell whether POST {args.url} with Idempotency-Key {key} happened: {failed}"
        ) from None
    status, body = answer.status, _decode(answer.body)
    received = body.get("received") if isinstance(body, dict) else None
    if status == 200 and received is True:
        response = body.get("response") if isinstance(body, dict) else None
        if (
            isinstance(response, dict)
            and isinstance(response.get("status"), int)
            and "body" in response
        ):
            return Reconciled(
                happened=True,
                result={"status": response["status"], "body": response["body"], "key": key},
            )
        raise DeterministicToolError(
            f"POST {args.url} with Idempotency-Key {key} arrived, but GET {probe} did not "
            "give the response it got, so the step's result is unknown",
            hint='status_url must answer {"received": true, "response": {"status": ..., '
            '"body": ...}}; or give the result by hand: onward resolve THREAD STEP done '
            "--result '{...}'",
        )
    # A bare 404 (no {"received": false}) may just mean status_url is wrong; reading it as
    # "not sent" would send twice, so only the explicit answer counts.
    if status in (200, 404) and received is False:
        return Reconciled(happened=False)
    raise DeterministicToolError(
        f"cannot tell whether POST {args.url} with Idempotency-Key {key} happened: "
        f"GET {probe} answered {status}: {_excerpt(body)}",
        hint='status_url must answer 200 {"received": true} or 404 {"received": false}; '
        "check the receiving service, then mark the effect as done or not",
    )


@tool(side_effect=SideEffect.UNSAFE, reconcile=reconcile_http_post, service=egress.service_of)
def http_post(
    url: str,
    payload: dict[str, Any],
    status_url: str | None = None,
    timeout: float = 10.0,
    *,
    ctx: ToolContext,
) -> dict[str, Any]:
    """POST JSON with an Idempotency-Key header to an allowlisted host
    (ONWARD_HTTP_ALLOW=host[:port],...), never following a redirect; 429/5xx/network
    errors are transient."""
    key = _require_key(ctx, "http_post")
    try:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise DeterministicToolError(f"payload is not JSON-serialisable: {exc}") from None
    # The egress policy refuses a host not in ONWARD_HTTP_ALLOW before anything is sent.
    # A network failure (refused, reset, DNS, timeout) is transient with maybe_happened:
    # after a timeout the server may still have acted; a retry reuses the key, and the
    # ledger's reconcile covers a crash here. Redirects are not followed (urllib would
    # turn the POST into a GET without the body): the 3xx comes back and fails here.
    answer = egress.request(
        "POST",
        url,
        data=data,
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
        timeout=timeout,
    )
    status, body = answer.status, _decode(answer.body)
    if status == 429 or status >= 500:
        raise TransientToolError(
            f"POST {url} answered {status}: {_excerpt(body)}; worth retrying with the "
            "same Idempotency-Key later"
        )
    if 400 <= status < 500:
        raise DeterministicToolError(
            f"POST {url} answered {status}: {_excerpt(body)}",
            hint="fix the payload or the URL; the same request will be refused again",
        )
    if not 200 <= status < 300:  # 1xx, or a 3xx that was not followed
        location = answer.headers.get("Location")
        where = f" to {location}" if location else ""
        raise DeterministicToolError(
            f"POST {url} answered {status}{where}: {_excerpt(body)}",
            hint="the endpoint redirected or answered oddly; post to the final URL",
        )
    return {"status": status, "body": body, "key": key}
