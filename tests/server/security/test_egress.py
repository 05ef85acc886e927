"""Network egress (issue 17): every network tool goes through one policy
(onward.policies.egress), and
redirects are re-checked hop by hop.

The attacks run against a real ``onward serve`` allowed to reach one loopback server
(``ONWARD_HTTP_ALLOW=127.0.0.1:ALLOWED``); a second loopback server on another port stands
for the host the attacker wants to reach. Each attack asserts the refusal (the step's
failure names the host and the fix) and that nothing happened: the second server never
saw a request, and the allowed one saw only what the policy let through. The unit tests
below them pin the policy itself, in-process against the same kind of servers.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import pytest

from onward import DeterministicToolError, ToolContext, TransientToolError, default_registry
from onward.policies.egress import (
    ALLOW_ENV,
    AllowedHost,
    EgressPolicy,
    normal_host,
    parse_url,
    policy_from_env,
    request,
    service_of,
)
from tests.support.common import BACKENDS, postgres_schema
from tests.support.security import TOKENS, auth, start
from tests.support.serve import serve

# One worker runs this file: its module-scoped `net` fixture starts a real server,
# which other workers would start again (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_egress")

NO_PROXY = {"no_proxy": "127.0.0.1,localhost", "NO_PROXY": "127.0.0.1,localhost"}


# --------------------------------------------------------------------------- servers


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Recorder:
    """A loopback HTTP server that records every request. ``/redirect?to=URL&code=N``
    answers N (302 by default) with ``Location: URL``; ``/loop?n=K`` redirects to
    ``/loop?n=K+1`` forever; anything else answers 200 ``{"ok": true}``."""

    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.recorder = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def paths(self) -> list[str]:
        return [s.path for s in self.seen]

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        recorder: Recorder = self.server.recorder  # type: ignore[attr-defined]
        recorder.seen.append(Seen(self.command, self.path, dict(self.headers.items()), body))
        parts = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(parts.query))
        if parts.path == "/redirect":
            self._answer(int(query.get("code", "302")), {"to": query["to"]}, query["to"])
        elif parts.path == "/loop":
            self._answer(302, {}, f"/loop?n={int(query.get('n', '0')) + 1}")
        else:
            self._answer(200, {"ok": True, "path": self.path})

    do_GET = do_POST = do_HEAD = _handle

    def _answer(self, status: int, body: Any, location: str | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        if location is not None:
            self.send_header("Location", location)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def redirect(server: Recorder, to: str, code: int = 302) -> str:
    return f"{server.base}/redirect?{urllib.parse.urlencode({'to': to, 'code': code})}"


# --------------------------------------------------------------------------- a real server


@dataclass(frozen=True)
class Net:
    client: httpx.Client
    """The attacker's client of ``onward serve``."""
    allowed: Recorder
    """The one host:port in ONWARD_HTTP_ALLOW."""
    other: Recorder
    """Same host, another port: not allowed. No test may ever make it see a request."""


@pytest.fixture(scope="module", params=BACKENDS)
def net(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    """One ``onward serve`` per backend for this module (server starts are what CI time
    goes on); each test clears what the allowed server saw."""
    with ExitStack() as stack:
        allowed, other = stack.enter_context(Recorder()), stack.enter_context(Recorder())
        root = tmp_path_factory.mktemp("egress")
        (root / "work").mkdir()
        db = (
            f"sqlite:///{root / 'store' / 'onward.db'}"
            if request.param == "sqlite"
            else stack.enter_context(postgres_schema())
        )
        env = {"ONWARD_API_TOKENS": TOKENS, ALLOW_ENV: f"127.0.0.1:{allowed.port}", **NO_PROXY}
        url = stack.enter_context(serve(db, root / "work", **env))
        client = stack.enter_context(httpx.Client(base_url=url, headers=auth(), timeout=60))
        yield Net(client, allowed, other)
        assert other.seen == []


@pytest.fixture
def attack(net: Net) -> Iterator[Net]:
    net.allowed.seen.clear()
    yield net
    assert net.other.seen == [], "a refused host was reached"


WAVE = 4
"""Steps a run starts at once (the server's max_concurrency)."""


def run_steps(client: httpx.Client, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Run independent attack steps, one wave per run, and merge the steps' records. A
    run that does not escalate (a tighter policy, allowed over HTTP) fails after a wave
    with a failed step, so each wave gets its own run."""
    merged: dict[str, Any] = {}
    for i in range(0, len(steps), WAVE):
        wave = steps[i : i + WAVE]
        run_input = {
            "goal": "fetch",
            "plan": {"steps": wave},
            "policy": {"escalate_failures": False},
        }
        _, res = start(client, run_input)
        assert res.status_code == 200, res.text
        got = res.json()["steps"]
        assert set(got) == {s["id"] for s in wave}, res.json()
        merged.update(got)
    return merged


def refused(step: dict[str, Any], host: str) -> None:
    """The step failed deterministically naming ``host``, with the fix as its hint."""
    assert step["status"] == "failed", step
    failure = step["failure"]
    assert failure["failure_class"] == "deterministic", failure
    assert f"host {host} is not allowed" in failure["message"]
    assert failure["hint"] == (
        f"add {host} to ONWARD_HTTP_ALLOW (comma-separated hosts) if the run may reach it"
    )


def test_http_get_redirects_to_a_host_not_allowed_are_refused_before_the_hop(
    attack: Net,
) -> None:
    allowed, other = attack.allowed, attack.other
    target = f"127.0.0.1:{other.port}"
    plan = [
        {"id": "r302", "tool": "http_get", "args": {"url": redirect(allowed, other.base)}},
        *(
            {
                "id": f"r{code}",
                "tool": "http_get",
                "args": {"url": redirect(allowed, f"{other.base}/x", code)},
            }
            for code in (301, 303, 307, 308)
        ),
        # Protocol-relative: same scheme, another authority.
        {
            "id": "rel",
            "tool": "http_get",
            "args": {"url": redirect(allowed, f"//{target}/x")},
        },
        # Two hops: the first stays on the allowed host, the second leaves it.
        {
            "id": "two",
            "tool": "http_get",
            "args": {"url": redirect(allowed, redirect(allowed, f"{other.base}/y"))},
        },
        # Control: a redirect within the allowed host is followed.
        {"id": "ok", "tool": "http_get", "args": {"url": redirect(allowed, "/landed")}},
    ]
    steps = run_steps(attack.client, plan)
    for sid in ("r302", "r301", "r303", "r307", "r308", "rel", "two"):
        refused(steps[sid], target)
        assert "redirected to" in steps[sid]["failure"]["message"]
    assert steps["ok"]["status"] == "done"
    # Seven refused steps asked once, "two" twice (its first hop stays), "ok" once.
    assert sorted(p.split("?")[0] for p in allowed.paths()) == ["/landed"] + ["/redirect"] * 9
    assert other.seen == []


def test_http_post_to_a_host_not_allowed_is_refused_before_anyone_is_asked(
    attack: Net,
) -> None:
    other = attack.other
    plan = {
        "steps": [
            {
                "id": "p",
                "tool": "http_post",
                "args": {"url": f"{other.base}/effects", "payload": {"pay": 1000}},
            }
        ]
    }
    tid, res = start(attack.client, {"goal": "post it", "plan": plan})
    assert res.status_code == 422, res.text  # no approval is asked for a call that cannot run
    assert f"host 127.0.0.1:{other.port} is not allowed" in res.text
    assert f"add 127.0.0.1:{other.port} to ONWARD_HTTP_ALLOW" in res.text
    state = attack.client.get(f"/threads/{tid}/state").json()
    assert not state.get("interrupts")
    assert not state.get("tasks")
    assert other.seen == []
    assert attack.allowed.seen == []


def _refused_at_validation(client: httpx.Client, step: dict[str, Any]) -> str:
    """The 422 a plan of this one step gets (nothing of it runs): its text."""
    _, res = start(client, {"goal": "fetch", "plan": {"steps": [step]}})
    assert res.status_code == 422, (step, res.text)
    return res.text


def test_url_tricks_are_refused_and_reach_nothing(attack: Net) -> None:
    allowed, other = attack.allowed, attack.other
    a, o = allowed.port, other.port
    tricks = {
        "file": ("file:///etc/passwd", "is not an http(s) URL"),
        "ftp": (f"ftp://127.0.0.1:{a}/", "is not an http(s) URL"),
        "userinfo": (f"http://127.0.0.1:{a}@127.0.0.1:{o}/", "user info"),
        "userinfo2": (f"http://127.0.0.1:{a}:x@127.0.0.1:{o}/", "user info"),
        "pct": (f"http://127.0.0.1%3A{a}/", "not a plain host name"),
        "portname": (f"http://127.0.0.1:{a}.evil.test/", "not a valid URL"),
    }
    hosts = {
        "upper": (f"http://LOCALHOST:{a}/", f"localhost:{a}"),  # a name is not its address
        "dot": (f"http://127.0.0.1.:{o}/", f"127.0.0.1:{o}"),  # trailing dot, wrong port
        "decimal": (f"http://2130706433:{a}/", f"2130706433:{a}"),  # 127.0.0.1, spelt oddly
        "mapped": (f"http://[::ffff:127.0.0.1]:{a}/", f"[::ffff:7f00:1]:{a}"),
        "fragment": (f"http://127.0.0.1:{o}#@127.0.0.1:{a}/", f"127.0.0.1:{o}"),
        "suffix": (f"http://127.0.0.1:{o}/?127.0.0.1:{a}", f"127.0.0.1:{o}"),
    }
    for sid, (url, message) in tricks.items():
        step = {"id": sid, "tool": "http_get", "args": {"url": url}}
        assert message in _refused_at_validation(attack.client, step), sid
    for sid, (url, host) in hosts.items():
        step = {"id": sid, "tool": "http_get", "args": {"url": url}}
        text = _refused_at_validation(attack.client, step)
        assert f"host {host} is not allowed" in text, (sid, text)
        assert f"add {host} to ONWARD_HTTP_ALLOW" in text, (sid, text)
    # Control: the allowed host in upper case with a trailing dot is the same host.
    got = run_steps(
        attack.client,
        [{"id": "same", "tool": "http_get", "args": {"url": f"HTTP://127.0.0.1.:{a}/s"}}],
    )
    assert got["same"]["status"] == "done"
    assert allowed.paths() == ["/s"]
    assert other.seen == []


# --------------------------------------------------------------------------- the policy


def test_allowlist_entries_parse_and_normalise() -> None:
    policy = EgressPolicy.parse(" Example.COM. , 127.0.0.1:8080,[0:0::1]:9, ::2 ,,")
    assert policy.allow == {
        AllowedHost("example.com"),
        AllowedHost("127.0.0.1", 8080),
        AllowedHost("::1", 9),
        AllowedHost("::2"),
    }
    assert str(AllowedHost("::1", 9)) == "[::1]:9"
    assert EgressPolicy.parse("").allow == frozenset()


@pytest.mark.parametrize(
    "entry",
    [
        "http://x.com",
        "x.com/path",
        "user@x.com",
        "*.x.com",
        "x.com:http",
        "x.com:0",
        "[::1",
        "é.com",
    ],
)
def test_malformed_allowlist_entries_are_refused_with_the_fix(
    entry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match=r"entry '.*': "):
        EgressPolicy.parse(entry)
    monkeypatch.setenv(ALLOW_ENV, f"ok.com,{entry}")
    with pytest.raises(DeterministicToolError, match="ONWARD_HTTP_ALLOW is malformed") as info:
        policy_from_env()
    assert info.value.hint is not None
    assert "host:port" in info.value.hint


def test_the_policy_is_frozen_and_validated() -> None:
    policy = EgressPolicy.parse("a.com")
    with pytest.raises(AttributeError):
        policy.max_redirects = 50  # type: ignore[misc]
    with pytest.raises(ValueError, match="max_redirects"):
        EgressPolicy(max_redirects=-1)
    with pytest.raises(ValueError, match="not normalised"):
        AllowedHost("A.com")
    with pytest.raises(ValueError, match=r"1\.\.65535"):
        AllowedHost("a.com", 70000)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://api.test/x", True),
        ("https://API.Test./x", True),  # case and the absolute-name dot
        ("http://api.test:8443/x", True),  # a bare host allows any port
        ("http://api.test.evil/x", False),
        ("http://evil-api.test/x", False),
        ("http://xapi.test/x", False),
        ("http://local.test:8080/", True),
        ("http://local.test/", False),  # port 80 is not 8080
        ("http://local.test:8081/", False),
        ("https://web.test/", True),  # web.test:443 and the https default port
        ("http://web.test/", False),
        ("http://127.0.0.1:9/", True),
        ("http://localhost:9/", False),  # names are not resolved
        ("http://[::1]:9/", False),
        ("http://[0:0:0:0:0:0:0:1]:7/", True),
        ("http://[::1]:7/", True),
    ],
)
def test_hosts_match_on_the_parsed_host_and_port(url: str, allowed: bool) -> None:
    policy = EgressPolicy.parse("api.test,local.test:8080,web.test:443,127.0.0.1:9,[::1]:7")
    assert policy.allows(parse_url(url)) is allowed
    if not allowed:
        with pytest.raises(DeterministicToolError, match="is not allowed") as info:
            policy.check(url)
        assert info.value.hint is not None
        assert info.value.hint.startswith(f"add {parse_url(url).netloc} to ONWARD_HTTP_ALLOW")


def test_what_is_requested_is_the_url_that_was_checked() -> None:
    target = parse_url("HTTP://Api.Test.:8080?q=1#frag")
    assert (target.scheme, target.host, target.port) == ("http", "api.test", 8080)
    assert target.url == "http://api.test:8080/?q=1"
    assert parse_url("https://x.test/").port == 443
    assert normal_host("[::FFFF:127.0.0.1]") == "::ffff:7f00:1"
    assert service_of({"url": "http://API.test.:80/a"}) == "api.test:80"
    assert service_of({"url": "ftp://x"}) is None


def test_an_empty_allowlist_allows_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    with Recorder() as server:
        with pytest.raises(DeterministicToolError, match="is not allowed"):
            request("GET", server.base)
        assert server.seen == []


# --------------------------------------------------------------------------- request()


@pytest.fixture
def two(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Recorder, Recorder]]:
    for name, value in NO_PROXY.items():
        monkeypatch.setenv(name, value)
    with Recorder() as allowed, Recorder() as other:
        monkeypatch.setenv(ALLOW_ENV, f"127.0.0.1:{allowed.port}")
        yield allowed, other


def call(name: str, args: dict[str, Any], tmp_path: Path, key: str | None = "k1") -> Any:
    spec = default_registry.get(name)
    assert spec is not None
    ctx = ToolContext(thread_id="t", step_id="s", attempt=1, workdir=tmp_path, idempotency_key=key)
    return spec.call(spec.args_model.model_validate(args), ctx)


def test_redirects_within_the_policy_are_followed_and_cross_origin_drops_credentials(
    two: tuple[Recorder, Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    allowed, other = two
    monkeypatch.setenv(ALLOW_ENV, f"127.0.0.1:{allowed.port},localhost:{other.port}")
    hop = f"http://localhost:{other.port}/there"
    answer = request(
        "GET",
        redirect(allowed, hop),
        headers={"Authorization": "Bearer s3cret", "X-Trace": "t"},
    )
    assert (answer.status, answer.url) == (200, hop)
    assert json.loads(answer.body) == {"ok": True, "path": "/there"}
    [first] = allowed.seen
    [second] = other.seen
    assert first.headers["Authorization"] == "Bearer s3cret"
    assert "Authorization" not in second.headers
    assert second.headers["X-Trace"] == "t"


def test_redirect_hops_are_bounded(two: tuple[Recorder, Recorder]) -> None:
    allowed, _ = two
    with pytest.raises(DeterministicToolError, match="redirected more than 5 times"):
        request("GET", f"{allowed.base}/loop")
    assert len(allowed.seen) == 6
    allowed.seen.clear()
    policy = EgressPolicy.parse(f"127.0.0.1:{allowed.port}", max_redirects=0)
    with pytest.raises(DeterministicToolError, match="more than 0 times"):
        request("GET", f"{allowed.base}/loop", policy=policy)
    assert len(allowed.seen) == 1


@pytest.mark.parametrize("to", ["file:///etc/passwd", "ftp://127.0.0.1/x", "http://a@b.test/"])
def test_redirects_to_other_schemes_or_user_info_are_refused(
    two: tuple[Recorder, Recorder], to: str
) -> None:
    allowed, other = two
    with pytest.raises(DeterministicToolError, match="not followed") as info:
        request("GET", redirect(allowed, to))
    assert "redirected to" in str(info.value)
    assert other.seen == []


def test_a_post_does_not_follow_redirects(two: tuple[Recorder, Recorder], tmp_path: Path) -> None:
    allowed, other = two
    # Even with both hosts allowed, the redirect is not followed: it comes back as is.
    policy = EgressPolicy.parse(f"127.0.0.1:{allowed.port},127.0.0.1:{other.port}")
    answer = request("POST", redirect(allowed, other.base, 307), data=b"{}", policy=policy)
    assert answer.status == 307
    with pytest.raises(DeterministicToolError, match=f"answered 307 to {other.base}") as info:
        call("http_post", {"url": redirect(allowed, other.base, 307), "payload": {}}, tmp_path)
    assert info.value.hint is not None
    assert "final URL" in info.value.hint
    assert [s.method for s in allowed.seen] == ["POST", "POST"]
    assert other.seen == []


def test_network_errors_stay_transient(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(ALLOW_ENV, f"127.0.0.1:{port}")
    with pytest.raises(TransientToolError, match="ConnectionRefusedError") as get:
        call("http_get", {"url": f"http://127.0.0.1:{port}/"}, tmp_path)
    assert get.value.maybe_happened is False
    with pytest.raises(TransientToolError, match="ConnectionRefusedError") as post:
        call("http_post", {"url": f"http://127.0.0.1:{port}/", "payload": {}}, tmp_path)
    assert post.value.maybe_happened is True


def test_http_post_and_its_reconcile_probe_refuse_hosts_not_allowed(
    two: tuple[Recorder, Recorder], tmp_path: Path
) -> None:
    allowed, other = two
    with pytest.raises(DeterministicToolError, match="is not allowed") as info:
        call("http_post", {"url": f"{other.base}/effects", "payload": {"a": 1}}, tmp_path)
    assert info.value.hint == (
        f"add 127.0.0.1:{other.port} to ONWARD_HTTP_ALLOW (comma-separated hosts) if the run "
        "may reach it"
    )
    spec = default_registry.get("http_post")
    assert spec is not None
    assert spec.reconcile is not None
    for status_url in (f"{other.base}/status", redirect(allowed, f"{other.base}/status")):
        args = {"url": f"{allowed.base}/effects", "payload": {}, "status_url": status_url}
        with pytest.raises(DeterministicToolError, match="cannot tell whether POST") as probe:
            spec.reconcile("k1", spec.args_model.model_validate(args))
        assert f"host 127.0.0.1:{other.port} is not allowed" in str(probe.value)
        assert probe.value.hint is not None
        assert probe.value.hint.startswith(f"add 127.0.0.1:{other.port} to ONWARD_HTTP_ALLOW")
    assert other.seen == []
