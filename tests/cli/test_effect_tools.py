"""Built-in effect tools: ``notify`` writes one outbox line per idempotency key (even after a
torn write), ``http_post`` sends the key as ``Idempotency-Key`` and classifies failures, and
``reconcile_http_post`` asks the service whether an interrupted POST arrived. All offline,
against a loopback :class:`tests.support.httpfake.FakeService`."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import onward.tools.effects  # registers notify and http_post
from onward.errors import DeterministicToolError, TransientToolError
from onward.model.state import SideEffect
from onward.tools import Reconciled, ToolContext, ToolSpec, default_registry
from tests.support.httpfake import FakeService, accepted, get_stats, read_port
from tests.support.paths import ROOT

REPO = ROOT


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy from the environment must not intercept loopback requests.
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeService]:
    with FakeService() as svc:
        allow(monkeypatch, svc.port)
        yield svc


def allow(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    """http_post and its probe reach only hosts in ONWARD_HTTP_ALLOW (onward.policies.egress)."""
    monkeypatch.setenv("ONWARD_HTTP_ALLOW", f"127.0.0.1:{port}")


def spec_of(name: str) -> ToolSpec:
    spec = default_registry.get(name)
    assert spec is not None, f"{name} is not registered"
    return spec


def call(name: str, args: dict[str, Any], workdir: Path, key: str | None = "k1") -> Any:
    spec = spec_of(name)
    ctx = ToolContext(thread_id="t", step_id="s", attempt=1, workdir=workdir, idempotency_key=key)
    return spec.call(spec.args_model.model_validate(args), ctx)


def reconcile(key: str, args: dict[str, Any]) -> Reconciled:
    spec = spec_of("http_post")
    assert spec.reconcile is not None
    return spec.reconcile(key, spec.args_model.model_validate(args))


def outbox_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ----------------------------------------------------------------------------- notify


def test_notify_is_idempotent_untagged_and_needs_no_approval() -> None:
    spec = spec_of("notify")
    assert spec.side_effect is SideEffect.IDEMPOTENT
    assert spec.tags == frozenset()
    assert not spec.requires_approval


def test_notify_appends_one_line_per_key_and_a_recall_returns_the_first_result(
    tmp_path: Path,
) -> None:
    args = {"outbox": "out/outbox.jsonl", "message": "hello", "channel": "ops"}
    first = call("notify", args, tmp_path, key="k1")
    again = call("notify", args, tmp_path, key="k1")

    assert first == {"outbox": "out/outbox.jsonl", "key": "k1", "line": 1}
    assert again == first  # what a run without the crash reports
    [record] = outbox_records(tmp_path / "out/outbox.jsonl")
    assert record["key"] == "k1"
    assert record["channel"] == "ops"
    assert record["message"] == "hello"
    assert record["at"]


def test_notify_gives_each_key_its_own_line(tmp_path: Path) -> None:
    results = [
        call("notify", {"outbox": "o.jsonl", "message": f"m{i}"}, tmp_path, key=f"k{i}")
        for i in range(3)
    ]
    assert [r["line"] for r in results] == [1, 2, 3]
    records = outbox_records(tmp_path / "o.jsonl")
    assert [(r["key"], r["channel"]) for r in records] == [
        ("k0", "default"),
        ("k1", "default"),
        ("k2", "default"),
    ]


def test_notify_keeps_a_multiline_message_on_one_line(tmp_path: Path) -> None:
    call("notify", {"outbox": "o.jsonl", "message": "two\nlines"}, tmp_path)
    [record] = outbox_records(tmp_path / "o.jsonl")
    assert record["message"] == "two\nlines"


def test_notify_skips_a_torn_last_line_and_does_not_glue_onto_it(tmp_path: Path) -> None:
    outbox = tmp_path / "o.jsonl"
    whole = json.dumps({"key": "k0", "channel": "default", "message": "m", "at": "x"})
    # A crash mid-write: the last record is cut short, without its newline.
    outbox.write_text(whole + "\n" + '{"key": "k1", "chan')

    result = call("notify", {"outbox": "o.jsonl", "message": "m1"}, tmp_path, key="k1")

    assert result == {"outbox": "o.jsonl", "key": "k1", "line": 3}
    lines = outbox.read_text().splitlines()
    assert lines[1] == '{"key": "k1", "chan'  # the fragment stays, alone on its line
    assert json.loads(lines[2])["key"] == "k1"
    # Later scans still see the record behind the torn line.
    again = call("notify", {"outbox": "o.jsonl", "message": "m1"}, tmp_path, key="k1")
    assert again == result
    assert len(outbox.read_text().splitlines()) == 3


def test_notify_writes_a_key_once_under_concurrent_calls(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def send() -> None:
        try:
            call("notify", {"outbox": "o.jsonl", "message": "m"}, tmp_path, key="same")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [r["key"] for r in outbox_records(tmp_path / "o.jsonl")] == ["same"]


def test_notify_without_an_idempotency_key_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(DeterministicToolError, match="notify needs an idempotency key"):
        call("notify", {"outbox": "o.jsonl", "message": "m"}, tmp_path, key=None)
    assert not (tmp_path / "o.jsonl").exists()


# ----------------------------------------------------------------------------- http_post


def test_http_post_is_unsafe_with_a_reconcile_probe() -> None:
    spec = spec_of("http_post")
    assert spec.side_effect is SideEffect.UNSAFE
    assert spec.reconcile is onward.tools.effects.reconcile_http_post
    assert spec.requires_approval


def test_http_post_sends_the_idempotency_key_header_and_the_payload(
    service: FakeService, tmp_path: Path
) -> None:
    payload = {"order": 42, "items": ["a", "b"], "note": "é"}
    result = call("http_post", {"url": service.url, "payload": payload}, tmp_path, key="k1")

    assert result == {"status": 200, "body": {"ok": True, "key": "k1"}, "key": "k1"}
    [post] = service.posts
    assert (post.path, post.key, post.body) == ("/effects", "k1", payload)
    assert service.counts["k1"] == 1


@pytest.mark.parametrize("status", [503, 500, 429])
def test_http_post_server_errors_and_rate_limits_are_transient(
    service: FakeService, tmp_path: Path, status: int
) -> None:
    service.fail_next(1, status=status)
    with pytest.raises(TransientToolError, match=f"answered {status}"):
        call("http_post", {"url": service.url, "payload": {}}, tmp_path, key="k1")
    # A retry with the same key goes through; the service saw the key twice.
    call("http_post", {"url": service.url, "payload": {}}, tmp_path, key="k1")
    assert service.counts["k1"] == 2
    assert service.received == {"k1"}


def test_http_post_client_error_is_deterministic_with_status_and_body(
    service: FakeService, tmp_path: Path
) -> None:
    service.fail_next(1, status=400)
    with pytest.raises(DeterministicToolError, match="answered 400") as info:
        call("http_post", {"url": service.url, "payload": {}}, tmp_path)
    assert "injected failure 400" in str(info.value)
    assert info.value.hint


def test_http_post_connection_refused_is_transient(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    allow(monkeypatch, port)
    url = f"http://127.0.0.1:{port}/effects"
    with pytest.raises(TransientToolError, match="failed: ConnectionRefusedError"):
        call("http_post", {"url": url, "payload": {}}, tmp_path)


def test_http_post_timeout_is_transient(service: FakeService, tmp_path: Path) -> None:
    service.delay = 2.0
    with pytest.raises(TransientToolError, match="failed"):
        call("http_post", {"url": service.url, "payload": {}, "timeout": 0.2}, tmp_path)
    # The service acted before the client gave up: exactly the case reconcile exists for.
    assert service.received == {"k1"}


def test_http_post_without_an_idempotency_key_fails_clearly(
    service: FakeService, tmp_path: Path
) -> None:
    with pytest.raises(DeterministicToolError, match="http_post needs an idempotency key"):
        call("http_post", {"url": service.url, "payload": {}}, tmp_path, key=None)
    assert service.posts == []


def test_http_post_refuses_non_http_urls(tmp_path: Path) -> None:
    with pytest.raises(DeterministicToolError, match="is not an http"):
        call("http_post", {"url": f"file://{tmp_path}/x", "payload": {}}, tmp_path)


# ----------------------------------------------------------------------------- reconcile


def test_reconcile_gives_a_received_post_the_result_the_post_returned(
    service: FakeService, tmp_path: Path
) -> None:
    args = {"url": service.url, "payload": {"a": 1}, "status_url": service.status_url}
    posted = call("http_post", args, tmp_path, key="k1")

    found = reconcile("k1", args)

    assert found.happened is True
    assert found.result == posted == {"status": 200, "body": accepted("k1"), "key": "k1"}


def test_a_received_post_whose_response_the_service_cannot_give_goes_to_a_person(
    service: FakeService, tmp_path: Path
) -> None:
    """It arrived, but its result is unknown: a later step could not read it, so onward
    does not make one up."""
    args = {"url": service.url, "payload": {}, "status_url": f"{service.base_url}/bare-status"}
    with pytest.raises(DeterministicToolError, match="did not give the response") as err:
        reconcile("k1", args)
    assert "onward resolve" in (err.value.hint or "")


def test_reconcile_says_not_happened_for_an_unknown_key(service: FakeService) -> None:
    args = {"url": service.url, "payload": {}, "status_url": service.status_url}
    assert reconcile("never-sent", args) == Reconciled(happened=False)


def test_reconcile_keeps_the_status_urls_own_query(service: FakeService, tmp_path: Path) -> None:
    args = {"url": service.url, "payload": {}, "status_url": f"{service.status_url}?tenant=a"}
    call("http_post", args, tmp_path, key="k 1&x")  # the key is URL-encoded in the probe
    assert reconcile("k 1&x", args).happened is True


def test_reconcile_without_status_url_raises_for_a_human(service: FakeService) -> None:
    args = {"url": service.url, "payload": {}}
    with pytest.raises(DeterministicToolError, match="no status_url") as info:
        reconcile("k1", args)
    assert "cannot tell whether POST" in str(info.value)
    assert info.value.hint is not None
    assert "status_url" in info.value.hint


def test_reconcile_does_not_read_a_bare_404_as_not_sent(service: FakeService) -> None:
    # A wrong status_url also answers 404; only an explicit {"received": false} counts.
    args = {"url": service.url, "payload": {}, "status_url": f"{service.base_url}/nope"}
    with pytest.raises(DeterministicToolError, match="answered 404"):
        reconcile("k1", args)


def test_reconcile_with_an_unreachable_status_url_is_transient(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()
    allow(monkeypatch, port)
    base = f"http://127.0.0.1:{port}"
    args = {"url": f"{base}/effects", "payload": {}, "status_url": f"{base}/status"}
    with pytest.raises(TransientToolError, match="cannot tell whether POST"):
        reconcile("k1", args)


# ----------------------------------------------------------------------------- the fake


def test_fake_service_runs_in_its_own_process_and_reports_stats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.httpfake", "--port-file", str(port_file)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        port = read_port(port_file)
        allow(monkeypatch, port)
        url = f"http://127.0.0.1:{port}/effects"
        call("http_post", {"url": url, "payload": {}}, tmp_path, key="a")
        call("http_post", {"url": url, "payload": {}}, tmp_path, key="a")
        call("http_post", {"url": url, "payload": {}}, tmp_path, key="b")
        assert get_stats(port) == {"keys": {"a": 2, "b": 1}, "total": 3, "received": ["a", "b"]}
        # Another process reconfigures it over HTTP.
        control = urllib.request.Request(
            f"http://127.0.0.1:{port}/control",
            data=json.dumps({"fail": 1, "fail_status": 503}).encode(),
            method="POST",
        )
        urllib.request.urlopen(control, timeout=5).close()
        with pytest.raises(TransientToolError, match="answered 503"):
            call("http_post", {"url": url, "payload": {}}, tmp_path, key="c")
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=10)
    assert b"Traceback" not in err
