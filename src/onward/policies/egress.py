"""One egress policy for every network tool: which URLs a run may reach.

The policy comes from ``ONWARD_HTTP_ALLOW`` (comma-separated ``host`` or ``host:port``; a
bare host allows any port on it; empty allows nothing). :func:`request` is the one way
onward's network tools (``http_get``, ``http_post`` and its reconcile probe) reach the
network, and custom tools may use it too::

    from onward.policies.egress import request

    @tool
    def fetch_price(sku: str) -> dict[str, Any]:
        answer = request("GET", f"https://prices.example.com/{sku}", timeout=10)
        return answer.as_json()   # a step's output must be JSON: never the response object

What is checked, on the URL as parsed (never as a substring):

* the scheme is ``http`` or ``https`` (urllib also speaks ``file:`` and ``ftp:``);
* there is no user info (``user@host``): it is where parsers disagree about the host;
* the host is a plain DNS name (ASCII letters, digits, ``-``, ``_``, dots) or an IP
  literal, compared case-insensitively, with one trailing dot dropped (``example.com.`` is
  the same name) and IPv6 in its compressed form (``[0:0::1]`` is ``[::1]``);
* names are not resolved: ``localhost`` and ``127.0.0.1`` are different entries, and so are
  ``127.1`` or ``2130706433``, which are refused unless listed as written;
* the port is the URL's or the scheme's default (80, 443), matched against ``host:port``
  entries.

Every redirect hop is checked the same way before it is requested, at most
:data:`MAX_REDIRECTS` of them, and credentials (``Authorization``, ``Cookie``) are not
carried to another origin. Requests other than GET and HEAD do not follow redirects at all
(urllib would turn a POST into a GET without its body): the 3xx is returned.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.message import Message
from typing import IO, Any

from onward.errors import DeterministicToolError, TransientToolError
from onward.settings import Settings, settings

ALLOW_ENV = "ONWARD_HTTP_ALLOW"
"""The environment variable the policy is read from."""

MAX_REDIRECTS = 5
"""Redirect hops a GET may follow (each one checked against the policy)."""

MAX_POLICY_REDIRECTS = 20
"""The most hops a policy may allow."""

SCHEMES = frozenset({"http", "https"})
DEFAULT_PORTS = {"http": 80, "https": 443}
FOLLOWS_REDIRECTS = frozenset({"GET", "HEAD"})
"""Methods whose redirects are followed; the others get the 3xx back."""

_CREDENTIALS = ("Authorization", "Cookie", "Proxy-authorization")
"""Header names (as urllib.request.Request stores them) dropped on a cross-origin hop."""

_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")


def normal_host(host: str) -> str:
    """The form hosts are compared in: lower case, no trailing dot, IPv6 compressed (no
    brackets). Raises ValueError for anything that is not a plain DNS name or IP literal
    (percent-escapes, ``@``, spaces, non-ASCII, zone ids)."""
    name = host.lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if ":" in name:
        if "%" in name:
            raise ValueError(f"{host!r}: IPv6 zone ids are not supported")
        try:
            return ipaddress.IPv6Address(name).compressed
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address") from None
    if name.endswith("."):
        name = name[:-1]
    if len(name) > 253 or not _NAME.fullmatch(name):
        raise ValueError(f"{host!r} is not a plain host name or IP address")
    try:
        return ipaddress.IPv4Address(name).compressed
    except ValueError:
        return name


def _netloc(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port is None else f"{shown}:{port}"


@dataclass(frozen=True, slots=True)
class AllowedHost:
    """One allowlist entry: a host, and the one port allowed on it (None: any)."""

    host: str
    port: int | None = None

    def __post_init__(self) -> None:
        if normal_host(self.host) != self.host:
            normal = normal_host(self.host)
            raise ValueError(f"host {self.host!r} is not normalised: use {normal!r}")
        if self.port is not None and not 0 < self.port < 65536:
            raise ValueError(f"port {self.port} is not in 1..65535")

    @classmethod
    def parse(cls, entry: str) -> AllowedHost:
        """``host``, ``host:port``, ``[v6]``, ``[v6]:port`` or a bare IPv6 address."""
        text = entry.strip()
        if "/" in text or "@" in text:
            raise ValueError("write host or host:port (no scheme, path or user@)")
        port_text: str | None = None
        if text.startswith("["):
            match = re.fullmatch(r"\[([^\]]*)\](?::([0-9]+))?", text)
            if not match:
                raise ValueError("write [ipv6] or [ipv6]:port")
            host, port_text = match.group(1), match.group(2)
        elif text.count(":") > 1:
            host = text  # a bare IPv6 address: no port
        elif ":" in text:
            host, port_text = text.rsplit(":", 1)
            if not (port_text.isascii() and port_text.isdigit()):
                raise ValueError(f"port {port_text!r} is not a number")
        else:
            host = text
        return cls(normal_host(host), None if port_text is None else int(port_text))

    def __str__(self) -> str:
        return _netloc(self.host, self.port)


@dataclass(frozen=True, slots=True)
class Target:
    """A URL the policy allowed, as parsed: what is requested is :attr:`url`, rebuilt
    from these parts (normalised host, no user info, no fragment)."""

    scheme: str
    host: str
    port: int
    """The URL's port, or the scheme's default."""
    explicit_port: bool
    url: str

    @property
    def origin(self) -> tuple[str, str, int]:
        return self.scheme, self.host, self.port

    @property
    def netloc(self) -> str:
        """``host`` or ``host:port`` as the URL gave it (normalised): what to add to the
        allowlist to allow it."""
        return _netloc(self.host, self.port if self.explicit_port else None)


def parse_url(url: str) -> Target:
    """Parse and normalise an http(s) URL; DeterministicToolError if it is not one onward
    would request (scheme, user info, host or port). Says nothing about the allowlist."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise DeterministicToolError(
            f"{url!r} is not a valid URL: {exc}", hint="use an http:// or https:// URL"
        ) from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise DeterministicToolError(
            f"{url!r} is not an http(s) URL", hint="use an http:// or https:// URL"
        )
    if "@" in parts.netloc:
        raise DeterministicToolError(
            f"{url!r} has user info before its host (user@host); onward does not send "
            "credentials in URLs",
            hint="remove the user@ part; pass credentials in a header from a custom tool",
        )
    if not parts.hostname:
        raise DeterministicToolError(f"{url!r} has no host", hint="use http(s)://HOST/...")
    try:
        host = normal_host(parts.hostname)
    except ValueError as exc:
        raise DeterministicToolError(
            f"{url!r}: {exc}", hint="write the host as a plain name or IP address"
        ) from None
    effective = DEFAULT_PORTS[scheme] if port is None else port
    rebuilt = urllib.parse.urlunsplit(
        (scheme, _netloc(host, port), parts.path or "/", parts.query, "")
    )
    return Target(scheme, host, effective, port is not None, rebuilt)


def service_of(args: Mapping[str, Any]) -> str | None:
    """A ``service=`` for tools with a ``url`` argument: the normalised ``host[:port]``
    (case, a trailing dot or user info do not make another breaker), None if unparseable."""
    try:
        return parse_url(str(args.get("url", ""))).netloc
    except DeterministicToolError:
        return None


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """Which hosts a run may reach; build it with :func:`policy_from_env` or
    :meth:`parse`. Empty allows nothing."""

    allow: frozenset[AllowedHost] = frozenset()
    max_redirects: int = MAX_REDIRECTS

    def __post_init__(self) -> None:
        if not all(isinstance(a, AllowedHost) for a in self.allow):
            raise TypeError("allow must hold AllowedHost entries")
        if not 0 <= self.max_redirects <= MAX_POLICY_REDIRECTS:
            raise ValueError(
                f"max_redirects must be 0..{MAX_POLICY_REDIRECTS}, got {self.max_redirects}"
            )

    @classmethod
    def parse(cls, text: str, *, max_redirects: int = MAX_REDIRECTS) -> EgressPolicy:
        """From ``ONWARD_HTTP_ALLOW``'s syntax; ValueError names a malformed entry."""
        allow: set[AllowedHost] = set()
        for entry in (e.strip() for e in text.split(",")):
            if not entry:
                continue
            try:
                allow.add(AllowedHost.parse(entry))
            except ValueError as exc:
                raise ValueError(f"entry {entry!r}: {exc}") from None
        return cls(frozenset(allow), max_redirects)

    def allows(self, target: Target) -> bool:
        return any(a.host == target.host and a.port in (None, target.port) for a in self.allow)

    def check(self, url: str, *, method: str = "GET", via: str | None = None) -> Target:
        """The parsed URL if the policy allows it, else DeterministicToolError naming the
        refused host and how to allow it. ``via``: the URL that redirected here."""
        what = f"{method} {via} redirected to {url}" if via else f"{method} {url}"
        try:
            target = parse_url(url)
        except DeterministicToolError as bad:
            if via is None:
                raise
            raise DeterministicToolError(
                f"{what}: not followed: {bad}",
                hint="the server redirected where onward does not go; request an allowed "
                "http(s) URL directly",
            ) from None
        if not self.allows(target):
            raise DeterministicToolError(
                f"{what}: host {target.netloc} is not allowed",
                hint=f"add {target.netloc} to {ALLOW_ENV} (comma-separated hosts) if the run "
                "may reach it",
            )
        return target


def policy_from_env(env: Mapping[str, str] | None = None) -> EgressPolicy:
    """The policy in ``ONWARD_HTTP_ALLOW`` (read now: tests and servers set it per
    process). A malformed entry is a DeterministicToolError for the step that needed it."""
    text = (settings() if env is None else Settings.from_env(env)).http_allow
    try:
        return EgressPolicy.parse(text)
    except ValueError as exc:
        raise DeterministicToolError(
            f"{ALLOW_ENV} is malformed: {exc}",
            hint=f"set {ALLOW_ENV} to comma-separated host or host:port entries, e.g. "
            "api.example.com,127.0.0.1:8080",
        ) from None


@dataclass(frozen=True, slots=True)
class EgressResponse:
    """What the last hop answered, whatever its status (a 404 or 503 is a response, not an
    exception: the caller classifies it)."""

    url: str
    """The URL that answered (after redirects)."""
    status: int
    headers: Message = field(repr=False)
    body: bytes = field(repr=False)
    truncated: bool = False
    """The body was longer than ``max_bytes`` and was cut there."""

    @property
    def content_type(self) -> str:
        return str(self.headers.get("Content-Type", ""))

    def as_json(self) -> dict[str, Any]:
        """What a tool may return as its output (a step's output must be JSON): ``url``,
        ``status``, ``content_type``, ``truncated``, ``text`` (the body decoded as UTF-8,
        undecodable bytes replaced) and ``json`` (the parsed body when the content type is
        JSON and it parses, else None)."""
        text = self.body.decode("utf-8", errors="replace")
        parsed: Any = None
        if "json" in self.content_type.lower() and not self.truncated:
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
        return {
            "url": self.url,
            "status": self.status,
            "content_type": self.content_type,
            "truncated": self.truncated,
            "text": text,
            "json": parsed,
        }


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a GET's redirects only to URLs the policy allows, one hop at a time, at most
    ``policy.max_redirects`` of them; other methods get the 3xx back."""

    # urllib's own loop limits must not fire first (their error says less).
    max_redirections = max_repeats = MAX_POLICY_REDIRECTS + 1

    def __init__(self, policy: EgressPolicy, origin: str) -> None:
        self.policy, self.origin, self.hops = policy, origin, 0

    def http_error_302(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
    ) -> Any:
        location = headers.get("location") or headers.get("uri")
        if location is not None and req.get_method() in FOLLOWS_REDIRECTS:
            # urllib refuses file: itself but would follow ftp:; say why in one place.
            self._check(req, fp, urllib.parse.urljoin(req.full_url, str(location)))
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    def _check(self, req: urllib.request.Request, fp: IO[bytes], newurl: str) -> Target:
        try:
            return self.policy.check(newurl, method=req.get_method(), via=req.full_url)
        except DeterministicToolError:
            fp.close()
            raise

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        if req.get_method() not in FOLLOWS_REDIRECTS:
            # urllib turns a redirected POST into a GET without the body: the effect would
            # silently not happen. Return the 3xx instead.
            return None
        self.hops += 1
        if self.hops > self.policy.max_redirects:
            fp.close()
            raise DeterministicToolError(
                f"{req.get_method()} {self.origin} redirected more than "
                f"{self.policy.max_redirects} times (last to {newurl})",
                hint="request the final URL directly",
            )
        # Request exactly what was checked (the rebuilt URL), not urllib's own parse.
        target = self._check(req, fp, newurl)
        new = super().redirect_request(req, fp, code, msg, headers, target.url)
        if new is not None and target.origin != parse_url(req.full_url).origin:
            for name in _CREDENTIALS:
                new.remove_header(name)
        return new


def request(
    method: str,
    url: str,
    *,
    data: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 20.0,
    max_bytes: int | None = None,
    policy: EgressPolicy | None = None,
) -> EgressResponse:
    """Send one request through the egress policy (``policy_from_env()`` unless given).

    Returns the response of the last hop whatever its status. Raises
    DeterministicToolError when the policy refuses the URL or a redirect hop (before
    anything is sent there) or the URL is malformed, and TransientToolError for network
    failures (refused, reset, DNS, timeout; ``maybe_happened`` unless GET/HEAD).
    """
    method = method.upper()
    policy = policy_from_env() if policy is None else policy
    target = policy.check(url, method=method)
    if timeout <= 0:
        raise DeterministicToolError(f"timeout must be > 0 seconds, got {timeout:g}")
    req = urllib.request.Request(target.url, data=data, method=method, headers=dict(headers or {}))
    # Built per call: the opener reads the proxy environment when it is built.
    opener = urllib.request.build_opener(_CheckedRedirects(policy, url))
    try:
        with opener.open(req, timeout=timeout) as response:
            return _response(response, response.geturl(), int(response.status), max_bytes)
    except urllib.error.HTTPError as err:
        try:
            return _response(err, err.geturl(), err.code, max_bytes)
        except (OSError, http.client.HTTPException) as exc:
            raise _network_error(method, url, exc) from None
        finally:
            err.close()
    except http.client.InvalidURL as exc:  # control characters and the like
        raise DeterministicToolError(f"{method} {url}: {exc}", hint="fix the URL") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise _network_error(method, url, exc) from None


def _network_error(method: str, url: str, exc: Exception) -> TransientToolError:
    """Refused, reset, DNS, timeout. After a timeout the server may still have acted."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return TransientToolError(
        f"{method} {url} failed: {type(reason).__name__}: {reason}",
        maybe_happened=method not in FOLLOWS_REDIRECTS,
    )


def _response(answer: Any, url: str, status: int, max_bytes: int | None) -> EgressResponse:
    if max_bytes is None:
        body: bytes = answer.read()
        return EgressResponse(url, status, answer.headers, body)
    body = answer.read(max_bytes + 1)
    return EgressResponse(url, status, answer.headers, body[:max_bytes], len(body) > max_bytes)


__all__ = [
    "ALLOW_ENV",
    "MAX_REDIRECTS",
    "AllowedHost",
    "EgressPolicy",
    "EgressResponse",
    "Target",
    "normal_host",
    "parse_url",
    "policy_from_env",
    "request",
    "service_of",
]
