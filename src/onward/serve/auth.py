"""Bearer tokens for ``onward serve``: ``ONWARD_API_TOKENS`` maps tokens to users.

``ONWARD_API_TOKENS="tok-a:alice,tok-b:bob"`` (or a JSON object ``{"tok-a": "alice"}``).
With tokens configured, every API call needs ``Authorization: Bearer TOKEN`` (or the
``x-api-key`` header LangGraph's clients send): none → 401, unknown → 401. A thread
belongs to the user who created it; other users get 404, as if it did not exist.
Without tokens the server is open (bind it to 127.0.0.1, the default) and every caller
is the user ``local``.
"""

from __future__ import annotations

import hmac

ANONYMOUS = "local"


def tokens_from_env() -> dict[str, str]:
    """``ONWARD_API_TOKENS`` (``tok:user,tok2:user2`` or a JSON object), parsed by settings."""
    from onward.settings import settings

    return dict(settings().api_tokens)


def user_for(tokens: dict[str, str], bearer: str | None, api_key: str | None) -> str | None:
    """The user a request acts as (``bearer``: the token of ``Authorization: Bearer``);
    None when tokens are configured and none matches."""
    if not tokens:
        return ANONYMOUS
    for candidate in (t.strip() for t in (bearer, api_key) if t):
        for token, user in tokens.items():
            if hmac.compare_digest(candidate.encode(), token.encode()):
                return user
    return None
