"""Resume tokens: when ``ONWARD_SECRET`` is set, answering a pending decision needs a token.

A token is ``base64url(user|expiry).hmac`` where the HMAC-SHA256 covers the thread id,
the interrupt id, the user and the expiry. Whoever holds the secret (the inbox, a
server in front of onward) mints tokens for a user; the answer must present the token
issued for that decision, to that user, before it expires.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime, timedelta

from onward.errors import TokenError
from onward.settings import settings


def secret() -> bytes | None:
    value = settings().secret
    return value.encode() if value else None


def ttl() -> timedelta:
    return settings().token_ttl


def _sign(key: bytes, thread_id: str, interrupt_id: str, user: str, expiry: int) -> str:
    msg = "\x1f".join([thread_id, interrupt_id, user, str(expiry)]).encode()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def mint(key: bytes, thread_id: str, interrupt_id: str, user: str, expires_at: datetime) -> str:
    expiry = int(expires_at.timestamp())
    head = base64.urlsafe_b64encode(f"{user}\x1f{expiry}".encode()).decode().rstrip("=")
    return f"{head}.{_sign(key, thread_id, interrupt_id, user, expiry)}"


def verify(
    key: bytes,
    token: str | None,
    *,
    thread_id: str,
    interrupt_id: str,
    user: str,
    now: datetime,
) -> None:
    """Raise :class:`TokenError` unless ``token`` was minted for exactly this answer."""
    if not token:
        raise TokenError(
            "this decision needs a resume token (ONWARD_SECRET is set); get one with "
            f"`onward inbox --user {user}` and pass it with --token"
        )
    try:
        head, sig = token.rsplit(".", 1)
        issued_to, expiry_text = (
            base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)).decode().split("\x1f")
        )
        expiry = int(expiry_text)
        signature = sig.encode("ascii")
    except (ValueError, UnicodeError):
        raise TokenError(
            "the resume token is malformed; copy it again from `onward inbox`"
        ) from None
    expected = _sign(key, thread_id, interrupt_id, issued_to, expiry)
    if not hmac.compare_digest(signature, expected.encode("ascii")):
        raise TokenError(
            "the resume token does not match this decision (another decision's token, a "
            "changed token, or a different ONWARD_SECRET); get a fresh one from `onward inbox`"
        )
    if issued_to != user:
        raise TokenError(
            f"the resume token was issued to {issued_to!r}, not to {user!r}; answer as "
            f"{issued_to!r} or get a token for {user!r}"
        )
    if now.timestamp() > expiry:
        raise TokenError(
            f"the resume token expired at {datetime.fromtimestamp(expiry, UTC).isoformat()}; get a "
            "fresh one from `onward inbox`"
        )
