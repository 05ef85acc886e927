"""Fuzzing a real ``onward serve`` over loopback (issue 17): whatever a token holder sends,
the answer is never a 5xx, every 4xx is JSON whose ``detail`` says what is wrong, the server
goes on answering, and the threads the requests do not target are unchanged byte for byte.

One server on SQLite (one backend keeps the suite's time down) serves the whole file.
Hypothesis draws the requests: arbitrary JSON values; bodies that mix the fields the routes
read with values of the wrong type; deep nesting; non-JSON bodies and wrong content types;
odd paths, queries and tokens; against real threads (done, waiting at an approval, without
a run, another user's) and ids that do not exist. ``ONWARD_FUZZ_SCALE=N`` draws N times as
many requests (CI runs the default, about 300); ``ONWARD_FUZZ_BACKEND=postgres`` fuzzes a
server on Postgres instead."""

from __future__ import annotations

import json
import os
import re
import string
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onward import errors
from onward.serve.wire import ASSISTANT_ID
from tests.support.common import postgres_schema
from tests.support.security import ATTACKER, TOKENS, VICTIM, auth
from tests.support.serve import start_server

# One worker runs this file: its module-scoped `world` fixture starts a real server,
# which other workers would start again (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_fuzz")

SCALE = int(os.environ.get("ONWARD_FUZZ_SCALE") or 1)
BACKEND = os.environ.get("ONWARD_FUZZ_BACKEND") or "sqlite"
SLOW_PLAN = {"steps": [{"id": "s", "tool": "slow", "args": {"value": 1}}]}
PAY_PLAN = {"steps": [{"id": "p", "tool": "pay", "args": {"amount": 5, "to": "bo"}}]}

ROUTES: tuple[tuple[str, str], ...] = (
    ("POST", "/threads"),
    ("POST", "/threads/search"),
    ("GET", "/threads/{thread_id}"),
    ("PATCH", "/threads/{thread_id}"),
    ("DELETE", "/threads/{thread_id}"),
    ("GET", "/threads/{thread_id}/state"),
    ("POST", "/threads/{thread_id}/state"),
    ("GET", "/threads/{thread_id}/state/{checkpoint_id}"),
    ("POST", "/threads/{thread_id}/state/checkpoint"),
    ("GET", "/threads/{thread_id}/history"),
    ("POST", "/threads/{thread_id}/history"),
    ("GET", "/threads/{thread_id}/runs"),
    ("POST", "/threads/{thread_id}/runs"),
    ("POST", "/threads/{thread_id}/runs/wait"),
    ("POST", "/threads/{thread_id}/runs/stream"),
    ("GET", "/threads/{thread_id}/runs/{run_id}"),
    ("DELETE", "/threads/{thread_id}/runs/{run_id}"),
    ("GET", "/threads/{thread_id}/runs/{run_id}/join"),
    ("GET", "/threads/{thread_id}/runs/{run_id}/stream"),
    ("POST", "/threads/{thread_id}/runs/{run_id}/cancel"),
    ("GET", "/threads/{thread_id}/stream"),
    ("POST", "/threads/{thread_id}/copy"),
    ("PATCH", "/threads/{thread_id}/state"),
    ("POST", "/threads/count"),
    ("POST", "/runs/cancel"),
    ("POST", "/runs"),
    ("POST", "/runs/stream"),
    ("POST", "/runs/wait"),
    ("POST", "/runs/batch"),
    ("POST", "/runs/crons"),
    ("POST", "/runs/crons/search"),
    ("POST", "/runs/crons/count"),
    ("POST", "/threads/{thread_id}/runs/crons"),
    ("GET", "/runs/crons/{cron_id}"),
    ("PATCH", "/runs/crons/{cron_id}"),
    ("DELETE", "/runs/crons/{cron_id}"),
    ("PUT", "/store/items"),
    ("GET", "/store/items"),
    ("DELETE", "/store/items"),
    ("POST", "/store/items/search"),
    ("POST", "/store/namespaces"),
    ("POST", "/assistants"),
    ("POST", "/assistants/search"),
    ("POST", "/assistants/count"),
    ("GET", "/assistants/{assistant_id}"),
    ("PATCH", "/assistants/{assistant_id}"),
    ("DELETE", "/assistants/{assistant_id}"),
    ("GET", "/assistants/{assistant_id}/graph"),
    ("GET", "/assistants/{assistant_id}/schemas"),
    ("GET", "/assistants/{assistant_id}/subgraphs"),
    ("GET", "/assistants/{assistant_id}/subgraphs/{namespace}"),
    ("POST", "/assistants/{assistant_id}/versions"),
    ("POST", "/assistants/{assistant_id}/latest"),
    ("GET", "/onward/runs"),
    ("GET", "/onward/runs/{thread_id}"),
)
"""Every API route (a test checks this against the server's own schema)."""
UNFUZZED = {("GET", "/ok"), ("GET", "/info"), ("GET", "/")}
RUN_ROUTES = [r for r in ROUTES if r[1].startswith("/threads/{thread_id}/runs") and r[0] == "POST"]
STATE_ROUTES = [
    r for r in ROUTES if "/state" in r[1] or "/history" in r[1] or r[1] == "/threads/{thread_id}"
]

KEYS = (
    *("goal", "plan", "steps", "command", "resume", "update", "values", "as_node"),
    *("checkpoint_id", "checkpoint", "limit", "offset", "metadata", "stream_mode", "input"),
    *("messages", "policy", "budget", "inputs", "assistant_id", "thread_id", "if_exists"),
    *("if_not_exists", "ids", "status", "sort_order", "before", "graph_id", "id", "tool"),
    *("args", "depends_on", "type", "content", "role", "decisions", "goto", "config"),
    *("context", "checks", "version", "source", "max_steps", "max_cost", "approve_tools"),
    *("allow_tools", "auto_approve", "deadline", "interrupt_before", "multitask_strategy"),
)
"""The field names the routes read, anywhere in a body."""
WORDS = (
    *("onward", ASSISTANT_ID, "create", "do_nothing", "reject", "values", "updates"),
    *("messages-tuple", "debug", "approve", "edit", "human", "ai", "user", "tool", "slow"),
    *("pay", "record", "schedule", "asc", "desc", "idle", "busy", "interrupted", "error"),
    *("", " ", "null", "0", "-1", "..", "../../etc/passwd", "%00", "1e999"),
)
"""Strings the routes compare against (valid values next to junk)."""
BIG = (2**31, 2**53 + 1, 2**63 - 1, -(2**63))
"""Large integers the server takes (past 64 bits a body is refused before any route reads
it, so those are rarer below: each one cuts a request short)."""

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from(BIG)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from(WORDS)
)
keys = st.sampled_from(KEYS) | st.text(max_size=10)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=16,
)
"""Any JSON value (no NaN or infinities, no lone surrogates: those are raw bodies below)."""
WRONG = (
    *(None, True, False, 0, -1, 1.5, -0.0, 2**63 - 1, 10**30, 10**4000),
    *("", "x", "onward", [], [1], ["a"], [[1, 2]], [{}], [None], {}, {"a": 1}, {"": []}),
    *({"checkpoint_id": 1}, {"checkpoint_id": "x"}, {"steps": 1}, {"resume": {}}),
)
"""One value of every JSON type (and of the shapes the routes look into)."""
anything = st.one_of(st.sampled_from(WRONG), json_values)
mixed = st.dictionaries(st.sampled_from(KEYS), anything, max_size=6)
"""An object of the fields the routes read, each with any value."""
FIELDS: dict[str, tuple[str, ...]] = {
    "/threads": ("thread_id", "metadata", "if_exists"),
    "/threads/search": ("metadata", "status", "ids", "limit", "offset", "sort_order"),
    "/threads/{thread_id}": ("metadata",),
    "/threads/{thread_id}/state": ("values", "as_node", "checkpoint_id", "checkpoint"),
    "/threads/{thread_id}/state/checkpoint": ("checkpoint",),
    "/threads/{thread_id}/history": ("limit", "before", "metadata"),
    "/assistants/search": ("graph_id", "metadata", "limit", "offset"),
    "/assistants/count": ("graph_id", "metadata", "limit", "offset"),
}
RUN_KEYS = (
    *("assistant_id", "input", "command", "stream_mode", "metadata", "config", "context"),
    *("checkpoint", "checkpoint_id", "if_not_exists", "checkpoint_during", "webhook"),
)
for _path in ("/runs", "/runs/wait", "/runs/stream"):
    FIELDS[f"/threads/{{thread_id}}{_path}"] = RUN_KEYS


def route_body(template: str) -> st.SearchStrategy[dict[str, Any]]:
    """An object of the fields ``template``'s route reads, each with any value."""
    fields = FIELDS.get(template, ())
    return st.fixed_dictionaries({}, optional={f: anything for f in fields})


def some(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a plausible value, sometimes anything."""
    return st.one_of(valid, valid, anything)


steps = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "id": some(st.sampled_from(["s", "p", "new", "x y", ""])),
            "tool": some(st.sampled_from(["slow", "pay", "record", "nope"])),
            "args": some(
                st.dictionaries(st.sampled_from(["value", "amount", "to", "label"]), json_values)
            ),
            "depends_on": some(st.lists(st.sampled_from(["s", "p", "new", "zz"]), max_size=2)),
            "checks": json_values,
            "description": json_values,
        },
    ),
    max_size=3,
)
plans = some(
    st.fixed_dictionaries({"steps": some(steps)}, optional={"version": json_values}) | steps
)
messages = some(
    st.lists(
        st.fixed_dictionaries(
            {},
            optional={
                "type": some(st.sampled_from(["human", "ai", "system", "tool"])),
                "role": some(st.sampled_from(["user", "assistant"])),
                "content": some(st.text(max_size=20)),
                "id": json_values,
            },
        )
        | st.text(max_size=10),
        max_size=3,
    )
)
inputs = some(
    st.fixed_dictionaries(
        {},
        optional={
            "goal": some(st.text(max_size=20)),
            "plan": plans,
            "messages": messages,
            "policy": some(
                st.dictionaries(
                    st.sampled_from(
                        ["approve_tools", "allow_tools", "auto_approve", "deadline", "approve_all"]
                    ),
                    json_values,
                )
            ),
            "budget": some(
                st.dictionaries(
                    st.sampled_from(["max_steps", "max_cost", "max_run_time", "max_tokens"]),
                    json_values,
                )
            ),
            "inputs": some(st.lists(st.sampled_from(["a.csv", "../x", "/etc/passwd"]))),
        },
    )
)
decisions = st.fixed_dictionaries(
    {"decisions": some(st.lists(st.fixed_dictionaries({"type": some(st.just("reject"))})))}
)
"""Answers (``reject`` only: an approval would pay, and leave the waiting target done)."""
commands = some(
    st.fixed_dictionaries(
        {},
        optional={
            "resume": some(decisions | st.sampled_from(["reject", "no"])),
            "update": some(st.fixed_dictionaries({}, optional={"plan": plans, "goal": scalars})),
            "goto": json_values,
        },
    )
)
run_bodies = st.fixed_dictionaries(
    {},
    optional={
        "assistant_id": some(st.sampled_from(["onward", ASSISTANT_ID, "nope"])),
        "input": inputs,
        "command": commands,
        "stream_mode": some(st.sampled_from(["values", "updates", "debug", "nope"])),
        "metadata": json_values,
        "checkpoint_id": json_values,
        "checkpoint": some(st.fixed_dictionaries({"checkpoint_id": json_values})),
        "if_not_exists": some(st.just("create")),
        "config": json_values,
        "multitask_strategy": json_values,
    },
)
state_bodies = st.fixed_dictionaries(
    {},
    optional={
        "values": some(
            st.fixed_dictionaries(
                {}, optional={"plan": plans, "messages": messages, "goal": scalars}
            )
        ),
        "as_node": some(st.sampled_from(["schedule", "plan", "execute"])),
        "checkpoint_id": json_values,
        "checkpoint": json_values,
        "limit": json_values,
        "before": json_values,
        "metadata": json_values,
    },
)


def nested(kind: int, depth: int) -> str:
    if kind == 0:
        return "[" * depth + "]" * depth
    if kind == 1:
        return '{"a": ' * depth + "1" + "}" * depth
    return '[{"metadata": ' * depth + "{}" + "}]" * depth


WRAPPERS = (
    "@",
    '{"metadata": @}',
    '{"metadata": {"k": @}}',
    '{"limit": @}',
    '{"ids": @}',
    '{"values": {"plan": @}}',
    '{"values": {"messages": @}}',
    '{"command": {"resume": @}}',
    '{"input": {"goal": "x", "plan": @}}',
    '{"input": {"goal": "x", "plan": {"steps": [{"id": "s", "tool": "slow", "args": @}]}}}',
)
deep_bodies = st.builds(
    lambda wrapper, kind, depth: wrapper.replace("@", nested(kind, depth)).encode(),
    st.sampled_from(WRAPPERS),
    st.integers(0, 2),
    st.integers(200, 2000) | st.integers(20, 120),
)
"""Nesting 200 to 2000 deep, and near the server's limit (what is below it must work)."""
odd_json = st.sampled_from(
    [
        b"NaN",
        b"-Infinity",
        b'{"limit": NaN}',
        b'{"metadata": {"k": Infinity}}',
        b'{"input": {"goal": "x", "plan": {"steps": [{"id": "s", "tool": "slow", '
        b'"args": {"value": NaN}}]}}}',
        b"1e999",
        b'{"limit": 1e999}',
        b"9" * 5000,
        b'{"offset": ' + b"9" * 5000 + b"}",
        b'"\\ud800"',
        b'{"metadata": {"k": "\\udfff"}}',
        b'{"metadata": {"\\ud83d": 1}}',
        b'{"input": {"goal": "\\ud800"}}',
        b'{"values": {"messages": [{"type": "human", "content": "\\udc00"}]}}',
        b"\xef\xbb\xbf{}",
        b"\xff\xfe{\x00}\x00",
        b'{"a": 1, "a": 2}',
        b"{" * 100_000,
        b"[" * 100_000 + b"]" * 100_000,
        b"",
        b" ",
        b"null",
        b"[]",
        b'"x"',
        b"0",
    ]
)
raw_bodies = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=64).map(str.encode),
    json_values.map(lambda v: json.dumps(v)[:-1].encode()),  # truncated JSON
    json_values.map(lambda v: json.dumps(v).encode("utf-16")),
    deep_bodies,
    odd_json,
)
content_types = st.sampled_from(
    [
        None,
        "application/json",
        "application/json",
        "application/json; charset=latin-1",
        "application/json; charset=utf-16",
        "application/vnd.api+json",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/xml",
        "*/*",
        "",
        "application/",
        ";;;",
    ]
)
junk_ids = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["..", ".", "%2e%2e", "null", "undefined", "0", "-1", " ", "a/b", "?x=1"]),
    st.sampled_from([str(uuid.UUID(int=0)), ASSISTANT_ID, "onward", "1" * 150]),
)
"""Ids that name nothing (or something else: the assistant's id is no thread)."""
queries = st.dictionaries(
    st.sampled_from(["limit", "before", "offset", "metadata", "x"]) | st.text(max_size=5),
    st.text(max_size=20)
    | st.integers().map(str)
    | st.sampled_from([str(10**30), "-1", "0", "1e9", "NaN", "inf", "", "[1]"]),
    max_size=3,
)
"""Query strings, for every GET (only history reads any)."""


def route_paths() -> st.SearchStrategy[tuple[str, str]]:
    return st.sampled_from(ROUTES)


# -- the server and its threads --------------------------------------------------------


@contextmanager
def serve_logged(db_url: str, workdir: Path, log: Path, **env: str) -> Iterator[str]:
    """``tests.support.serve.serve`` with the server's log kept where a failure can quote it,
    and a check that the server is still alive at the end."""
    proc, url = start_server(db_url, workdir, log=log, **env)
    try:
        yield url
        assert proc.poll() is None, f"the server died:\n{log.read_text()[-4000:]}"
    finally:
        proc.terminate()
        proc.wait(20)


ONWARD_ERRORS = {"OnwardError"}
_todo: list[type[BaseException]] = [errors.OnwardError]
while _todo:
    for _sub in _todo.pop().__subclasses__():
        ONWARD_ERRORS.add(_sub.__name__)
        _todo.append(_sub)


@dataclass
class World:
    """The server, a client with the attacker's token, and the threads requests aim at."""

    url: str
    log: Path
    client: httpx.Client
    alice: httpx.Client
    threads: dict[str, str] = field(default_factory=dict)
    """Targets by role: mallory's ``done``, ``waiting`` and ``empty``; alice's ``alice``."""
    sentinels: dict[str, tuple[httpx.Client, str]] = field(default_factory=dict)
    snapshots: dict[str, list[bytes]] = field(default_factory=dict)
    checkpoints: list[str] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    dirty: set[str] = field(default_factory=set)
    sent: int = 0

    # -- sending and checking --

    def send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content: bytes | None = None,
        content_type: str | None = "application/json",
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        client: httpx.Client | None = None,
    ) -> httpx.Response:
        if body is not None:
            content = json.dumps(body, ensure_ascii=False).encode()
        sent_headers = dict(headers or {})
        if content is not None and content_type is not None:
            sent_headers["content-type"] = content_type
        what = f"{method} {path} params={params!r} headers={sent_headers!r} body={content!r:.600}"
        try:
            res = (client or self.client).request(
                method, path, content=content, params=params, headers=sent_headers
            )
        except httpx.TransportError as exc:
            raise AssertionError(f"{what}\n→ {exc!r}\n{self.log_tail()}") from None
        self.sent += 1
        self.check(what, res)
        return res

    def check(self, what: str, res: httpx.Response) -> None:
        status = res.status_code
        assert status < 500, f"{what}\n→ {status}: {res.text[:600]}\n{self.log_tail()}"
        if status >= 400:
            try:
                doc = res.json()
            except ValueError:
                doc = None
            assert isinstance(doc, dict), f"{what}\n→ {status} is not a JSON object: {res.text!r}"
            detail = doc.get("detail")
            assert isinstance(detail, str), f"{what}\n→ {status} has no detail string: {doc!r}"
            assert detail.strip(), f"{what}\n→ {status} has an empty detail"
        elif status == 200 and "/runs/" in what:
            for name, message in internal_errors(res):
                raise AssertionError(f"{what}\n→ the run failed inside: {name}: {message}")

    def log_tail(self) -> str:
        text = self.log.read_text(errors="replace")
        return f"server log:\n{text[-3000:]}" if text.strip() else "(server log empty)"

    # -- the threads requests aim at --

    def new_thread(self, plan: dict[str, Any] | None, client: httpx.Client | None = None) -> str:
        client = client or self.client
        tid = str(client.post("/threads", json={}).json()["thread_id"])
        if plan is not None:
            self.settle()
            body = {"assistant_id": "onward", "input": {"goal": "fuzz target", "plan": plan}}
            res = client.post(f"/threads/{tid}/runs/wait", json=body)
            assert res.status_code == 200, res.text
        return tid

    def settle(self) -> None:
        """Wait for the runs fuzzed requests started in the background (a user may have only
        so many in flight: a 429 is right for the fuzzer, not for making a target)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = self.client.post("/threads/search", json={"status": "busy", "limit": 1000})
            if found.json() == []:
                return
            time.sleep(0.1)
        raise AssertionError(f"runs still in flight after 60 s: {found.text[:600]}")

    def thread(self, role: str) -> str:
        """A target thread in its role (made anew once a request changed its role)."""
        tid = self.threads[role]
        if role in self.dirty:
            self.dirty.discard(role)
            res = self.client.get(f"/threads/{tid}")
            doc = res.json() if res.status_code == 200 else {}
            fine = {
                "done": doc.get("values") is not None,
                "waiting": doc.get("status") == "interrupted",
                "empty": doc.get("values") is None and res.status_code == 200,
            }[role]
            if not fine:
                plan = {"done": SLOW_PLAN, "waiting": PAY_PLAN, "empty": None}[role]
                self.threads[role] = tid = self.new_thread(plan)
        return tid

    def thread_ids(self) -> st.SearchStrategy[str]:
        return st.one_of(
            st.sampled_from(["done", "waiting", "empty", "alice"]).map(self.role_id),
            st.uuids().map(str),
            junk_ids,
        )

    def role_id(self, role: str) -> str:
        if role == "alice":
            return self.threads["alice"]
        self.dirty.add(role)
        return self.thread(role)

    def snapshot(self, client: httpx.Client, tid: str) -> list[bytes]:
        paths = [f"/threads/{tid}/state", f"/threads/{tid}/history", f"/threads/{tid}/runs"]
        out = []
        for path in paths:
            res = client.get(path)
            assert res.status_code == 200, res.text
            out.append(res.content)
        out.append(client.post(f"/threads/{tid}/history", json={"limit": 100}).content)
        return out

    def assert_unchanged(self) -> None:
        """The server answers, and no thread the requests did not aim at changed."""
        assert httpx.get(f"{self.url}/ok", timeout=10).json() == {"ok": True}
        for name, (client, tid) in self.sentinels.items():
            assert self.snapshot(client, tid) == self.snapshots[name], name

    def fuzz(self, examples: int, draw_request: Callable[[st.DataObject], None]) -> None:
        """Draw and send ``examples`` requests (times $ONWARD_FUZZ_SCALE), then check that
        the threads the requests did not aim at are unchanged."""
        before = self.sent

        @settings(
            max_examples=examples * SCALE,
            deadline=None,
            database=None,
            print_blob=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(st.data())
        def run(data: st.DataObject) -> None:
            draw_request(data)

        run()
        assert self.sent - before >= examples * SCALE
        self.assert_unchanged()


def internal_errors(res: httpx.Response) -> Iterator[tuple[str, str]]:
    """Errors a run reported in a 200 answer that are not onward's own (a bug inside)."""
    found: list[dict[str, Any]] = []
    if res.headers.get("content-type", "").startswith("text/event-stream"):
        event = None
        for line in res.text.splitlines():
            if line.startswith("event:"):
                event = line.partition(":")[2].strip()
            elif line.startswith("data:") and event == "error":
                found.append(json.loads(line.partition(":")[2]))
    elif res.headers.get("content-type", "").startswith("application/json"):
        doc = res.json()
        if isinstance(doc, dict) and isinstance(doc.get("__error__"), dict):
            found.append(doc["__error__"])
    for err in found:
        if err.get("error") not in ONWARD_ERRORS:
            yield str(err.get("error")), str(err.get("message"))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("fuzz")
    workdir = root / "work"
    workdir.mkdir()
    with ExitStack() as stack:
        if BACKEND == "postgres":
            db = stack.enter_context(postgres_schema())
        else:
            db = f"sqlite:///{root / 'store' / 'onward.db'}"
        yield from fuzzed_world(db, workdir, root / "server.log")


def fuzzed_world(db: str, workdir: Path, log: Path) -> Iterator[World]:
    with (
        serve_logged(db, workdir, log, ONWARD_API_TOKENS=TOKENS) as url,
        httpx.Client(base_url=url, headers=auth(ATTACKER), timeout=60) as client,
        httpx.Client(base_url=url, headers=auth(VICTIM), timeout=60) as alice,
    ):
        w = World(url=url, log=log, client=client, alice=alice)
        w.threads = {
            "done": w.new_thread(SLOW_PLAN),
            "waiting": w.new_thread(PAY_PLAN),
            "empty": w.new_thread(None),
            "alice": w.new_thread(PAY_PLAN, alice),
        }
        # Sentinels: mallory's threads no request names, and alice's, which they all may.
        w.sentinels = {
            "mallory done": (client, w.new_thread(SLOW_PLAN)),
            "mallory waiting": (client, w.new_thread(PAY_PLAN)),
            "alice waiting": (alice, w.threads["alice"]),
            "alice done": (alice, w.new_thread(SLOW_PLAN, alice)),
        }
        for name, (c, tid) in w.sentinels.items():
            w.snapshots[name] = w.snapshot(c, tid)
            history = c.get(f"/threads/{tid}/history", params={"limit": 100}).json()
            w.checkpoints += [s["checkpoint_id"] for s in history]
            w.run_ids += [r["run_id"] for r in c.get(f"/threads/{tid}/runs").json()]
        for role in ("done", "waiting"):
            tid = w.threads[role]
            history = client.get(f"/threads/{tid}/history", params={"limit": 100}).json()
            w.checkpoints += [s["checkpoint_id"] for s in history]
            w.run_ids += [r["run_id"] for r in client.get(f"/threads/{tid}/runs").json()]
        assert w.checkpoints
        assert w.run_ids
        yield w
        w.assert_unchanged()


# -- the requests ----------------------------------------------------------------------


def fill(world: World, data: st.DataObject, template: str, *, junk: bool = True) -> str:
    """A route's path with ids drawn for its parameters (junk ones percent-encoded)."""
    path = template
    odd = junk_ids if junk else st.nothing()
    if "{thread_id}" in path:
        real = st.sampled_from(sorted(world.threads.values())) | st.uuids().map(str)
        tid = data.draw(world.thread_ids() if junk else real, label="thread_id")
        path = path.replace("{thread_id}", quote(tid, safe=""))
    if "{checkpoint_id}" in path:
        cid = data.draw(st.sampled_from(world.checkpoints) | odd, label="checkpoint_id")
        path = path.replace("{checkpoint_id}", quote(cid, safe=""))
    if "{run_id}" in path:
        rid = data.draw(st.sampled_from(world.run_ids) | odd, label="run_id")
        path = path.replace("{run_id}", quote(rid, safe=""))
    if "{assistant_id}" in path:
        aid = data.draw(st.sampled_from(["onward", ASSISTANT_ID]) | odd, label="assistant")
        path = path.replace("{assistant_id}", quote(aid, safe=""))
    for name in ("{namespace}", "{cron_id}"):
        if name in path:
            other = data.draw(junk_ids if junk else st.uuids().map(str), label=name)
            path = path.replace(name, quote(other, safe=""))
    return path


def ids_in(world: World) -> st.SearchStrategy[Any]:
    """Values for id fields inside bodies: real checkpoints, runs and targets, or junk."""
    return st.one_of(
        st.sampled_from(world.checkpoints),
        st.sampled_from(world.run_ids),
        st.sampled_from([world.threads["done"], world.threads["alice"]]),
        json_values,
    )


def send_drawn(world: World, data: st.DataObject, method: str, template: str, body: Any) -> None:
    if method == "DELETE":
        # A thread made for the purpose, another user's, or none: the targets stay.
        choice = data.draw(st.sampled_from(["fresh", "alice", "junk"]), label="delete")
        tid = {
            "fresh": lambda: world.new_thread(None),
            "alice": lambda: world.threads["alice"],
            "junk": lambda: data.draw(st.uuids().map(str) | junk_ids),
        }[choice]()
        world.send("DELETE", f"/threads/{quote(tid, safe='')}", body=body)
        return
    path = fill(world, data, template)
    if method == "GET":
        params = data.draw(queries, label="query")
        world.send("GET", path, params=params, body=body)
    else:
        world.send(method, path, body=body)


def test_every_route_is_fuzzed(world: World) -> None:
    schema = world.client.get("/openapi.json").json()
    served = {
        (method.upper(), path) for path, ops in schema["paths"].items() for method in ops
    } - UNFUZZED
    assert served == set(ROUTES)


def test_any_json_body_on_any_route(world: World) -> None:
    """Arbitrary JSON values, and objects of the fields the routes read with any values."""

    def draw(data: st.DataObject) -> None:
        method, template = data.draw(route_paths(), label="route")
        body = data.draw(
            st.one_of(json_values, mixed, route_body(template), route_body(template), st.none())
            if method != "DELETE"
            else st.none(),
            label="body",
        )
        send_drawn(world, data, method, template, body)

    world.fuzz(110, draw)


def test_run_and_state_requests_with_wrong_types(world: World) -> None:
    """Run requests (start, resume, update, stream modes, checkpoints) and state edits and
    history reads, shaped like real ones with wrong types and junk at every level."""

    def draw(data: st.DataObject) -> None:
        if data.draw(st.booleans(), label="run?"):
            method, template = data.draw(st.sampled_from(RUN_ROUTES), label="route")
            body = data.draw(run_bodies, label="body")
            if data.draw(st.booleans(), label="real checkpoint"):
                body["checkpoint_id"] = data.draw(ids_in(world))
        else:
            method, template = data.draw(st.sampled_from(STATE_ROUTES), label="route")
            body = data.draw(state_bodies, label="body") if method != "GET" else None
            if body is not None and data.draw(st.booleans(), label="real checkpoint"):
                body["checkpoint"] = {"checkpoint_id": data.draw(ids_in(world))}
        send_drawn(world, data, method, template, body)

    world.fuzz(90, draw)


def test_raw_bodies_deep_nesting_and_content_types(world: World) -> None:
    """Bytes that are not JSON, JSON that Python reads but no JSON client should send
    (NaN, 1e999, lone surrogates, 5000-digit numbers), nesting 200-2000 deep, and every
    content type, on every route that reads a body."""
    with_body = [r for r in ROUTES if r[0] in ("POST", "PATCH")]

    def draw(data: st.DataObject) -> None:
        method, template = data.draw(st.sampled_from(with_body), label="route")
        content = data.draw(raw_bodies, label="content")
        content_type = data.draw(content_types, label="content-type")
        world.send(method, fill(world, data, template), content=content, content_type=content_type)

    world.fuzz(70, draw)


def test_methods_tokens_and_odd_paths(world: World) -> None:
    """Wrong methods, missing and wrong tokens, and junk in every path segment."""
    tokens = st.one_of(
        st.just({}),
        st.text(string.ascii_letters + string.digits + "-._~+/=", min_size=1, max_size=30).map(
            lambda t: {"Authorization": f"Bearer x{t}"}
        ),
        st.sampled_from(
            [
                {"Authorization": "Basic dG9rLW1hbGxvcnk6"},
                {"Authorization": "Token tok-mallory"},
                {"Authorization": "Bearer tok-mallor"},
                {"Authorization": "Bearer tok-mallory-and-more"},
                {"Authorization": "tok-mallory"},
                {"Authorization": "Bearertok-mallory"},
                {"Authorization": "Bearer"},
                {"Authorization": "Bearer\ttok-mallory"},
                {"Authorization": "Bearer tok-mallor", "X-Api-Key": "tok-alic"},
                {"X-Api-Key": "tok-alic"},
                {"X-Api-Key": ""},
            ]
        ),
    )

    def draw(data: st.DataObject) -> None:
        method, template = data.draw(route_paths(), label="route")
        kind = data.draw(st.sampled_from(["method", "token", "path"]), label="kind")
        if kind == "method":
            other = data.draw(st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"]))
            if (other, template) in ROUTES or other == "DELETE":
                other = "PUT"
            world.send(other, fill(world, data, template), body={})
        elif kind == "token":
            headers = data.draw(tokens, label="token")
            with httpx.Client(base_url=world.url, timeout=60) as anonymous:
                path = fill(world, data, template, junk=False)
                res = world.send(method, path, body={}, headers=headers, client=anonymous)
            assert res.status_code == 401, res.text
        else:
            junk = data.draw(st.text(max_size=30), label="segment")
            path = re.sub(r"\{[a-z_]+\}", quote(junk, safe="") or "%20", template)
            world.send(method, path + data.draw(st.sampled_from(["", "/", "/x", "//"])))

    world.fuzz(40, draw)


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


FOUND: list[tuple[str, str, str | None, int, str]] = [
    # (method, path, body, status, in the detail): what the fuzzer found, each a 5xx (or
    # a 200 whose run failed inside, or a thread left unreadable) before the fix.
    ("POST", "/threads/search", '{"metadata": [1]}', 422, "metadata must be an object"),
    ("POST", "/assistants/count", '{"metadata": true}', 422, "metadata must be an object"),
    ("POST", "/threads/{done}/state/checkpoint", '{"checkpoint": [1]}', 422, "an object"),
    (
        "POST",
        "/threads/{done}/state/checkpoint",
        '{"checkpoint": {"checkpoint_id": [1]}}',
        422,
        "checkpoint_id must be a string",
    ),
    ("POST", "/threads/{done}/history", '{"before": [1]}', 422, "before must be a checkpoint"),
    ("POST", "/threads/{done}/history", '{"limit": 1' + "0" * 30 + "}", 422, "64 bits"),
    ("POST", "/threads/{done}/history", '{"metadata": {"k": 1' + "0" * 25 + "}}", 422, "64 bits"),
    ("POST", "/threads/{done}/history", '{"limit": -1}', 422, "must not be negative"),
    ("GET", "/threads/%00/state", None, 422, "NUL"),
    ("GET", "/threads/{done}/state/%00", None, 422, "NUL"),
    ("GET", "/threads/{done}/history?before=%00", None, 422, "NUL"),
    ("POST", "/threads/{waiting}/runs/wait", '{"command": {"goto": null}}', 422, "resume"),
    (
        "POST",
        "/threads/{fresh}/runs/wait",
        '{"input": {"goal": "x", "plan": {"steps": [{"id": "s", "tool": "slow", '
        '"args": {"value": 1' + "0" * 30 + "}}]}}}",
        422,
        "64 bits",
    ),
    (
        "POST",
        "/threads/{fresh}/runs/wait",
        '{"input": {"goal": "x", "plan": {"steps": []}, '
        '"policy": {"deadline": {"expire_after": "99999999999d"}}}}',
        422,
        "is too long; onward takes at most",
    ),
    (
        "POST",
        "/threads/{fresh}/runs/wait",
        '{"input": {"goal": "x", "plan": {"steps": []}, "inputs": ["' + "a" * 5000 + '"]}}',
        422,
        "not a usable file name",
    ),
    ("POST", "/threads/{fresh}/runs/wait", '{"input": {"goal": "a\\u0000b"}}', 422, "NUL"),
    ("PATCH", "/threads/{fresh}", '{"metadata": {"k": ' + _deep(900) + "}}", 422, "nested"),
    ("PATCH", "/threads/{fresh}", '{"metadata": {"k": ' + _deep(5000) + "}}", 422, "nested"),
    ("PATCH", "/threads/{fresh}", '{"metadata": {"k": "\\ud800"}}', 422, "lone surrogate"),
    ("PATCH", "/threads/{fresh}", '{"metadata": {"k": NaN}}', 422, "NaN"),
    ("PATCH", "/threads/{fresh}", '{"metadata": {"k": 1e999}}', 422, "too large"),
    ("PATCH", "/threads/{fresh}", None, 422, "body: Field required"),
    ("POST", "/threads", "[]", 422, "body: Input should be a valid dictionary"),
    ("POST", "/threads", '{"a": ', 422, "not valid JSON"),
    ("POST", "/threads/search", b"\xff\xfe\xfa".decode("latin-1"), 422, "not UTF-8"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "says"), FOUND)
def test_what_the_fuzzer_found_is_a_4xx_saying_what_is_wrong_and_changes_nothing(
    world: World, method: str, path: str, body: str | None, status: int, says: str
) -> None:
    world.settle()
    fresh = world.new_thread(None)
    before = world.client.get(f"/threads/{fresh}").json()
    path = path.format(done=world.thread("done"), waiting=world.thread("waiting"), fresh=fresh)
    content = body.encode("latin-1" if "\xff" in (body or "") else "utf-8") if body else None
    res = world.send(method, path, content=content)
    assert res.status_code == status, res.text
    assert says in res.json()["detail"], res.text
    # Nothing was stored: the thread reads as before, and the user's search still works.
    assert world.client.get(f"/threads/{fresh}").json() == before
    assert world.client.post("/threads/search", json={"limit": 1000}).status_code == 200


def test_a_limit_past_the_page_size_is_capped(world: World) -> None:
    done = world.thread("done")
    huge = str(10**30)
    for res in (
        world.send("GET", f"/threads/{done}/history", params={"limit": huge}),
        world.send("POST", f"/threads/{done}/history", body={"limit": 2**62}),
        world.send("POST", "/threads/search", body={"limit": 2**62, "offset": 2**62}),
        world.send("POST", "/assistants/search", body={"limit": 2**62}),
    ):
        assert res.status_code == 200, res.text
        assert isinstance(res.json(), list)
