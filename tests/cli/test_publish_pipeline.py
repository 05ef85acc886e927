"""The classic long-task pipeline (``examples/publish-pipeline``), offline, through the CLI:
collect the notes → draft with a model step (a loopback OpenAI-compatible server) → rule
checks send the first draft back → a person reviews the resolved post → publish (an
unsafe POST, approved) → update an index → notify. Killed with SIGKILL at each point
where a crash loses the most (between an effect and its record, between the record and
the checkpoint, inside the POST, after the approval's answers), then resumed: every step
done once, one POST, one notification, and the model not asked again for an answer it
gave."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.openai_fake import FakeOpenAI, Reply
from tests.support.paths import ROOT

EXAMPLE = ROOT / "examples" / "publish-pipeline"
SENT_BACK = {"title": "Q3", "body": "Revenue rose. TODO: the figures"}
TOOLS = ("--tools", "site_tools.py")
GOOD = {"title": "Q3: revenue up 20 %", "body": "Revenue up 20 % on the quarter, costs flat."}


class Site:
    """The blog: ``POST /posts`` stores a post once per Idempotency-Key and answers its URL."""

    def __init__(self) -> None:
        self.posts: dict[str, dict[str, Any]] = {}
        self.requests = 0
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                key = self.headers["Idempotency-Key"]
                site.requests += 1
                post = site.posts.setdefault(key, {**body, "url": f"/posts/{len(site.posts) + 1}"})
                data = json.dumps({"url": post["url"]}).encode()
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def site() -> Iterator[Site]:
    s = Site()
    yield s
    s.server.shutdown()
    s.server.server_close()


def env_of(api: FakeOpenAI, site: Site) -> dict[str, str]:
    """The run's model is the loopback server; the site's host is allowed."""
    return {"OPENAI_API_KEY": "x", "OPENAI_BASE_URL": api.base_url, "ONWARD_HTTP_ALLOW": site.host}


def copy_example(workdir: Path, site: Site) -> None:
    shutil.copytree(EXAMPLE / "sources", workdir / "sources")
    shutil.copy(EXAMPLE / "site_tools.py", workdir / "site_tools.py")
    plan = (EXAMPLE / "plan.yaml").read_text().replace("127.0.0.1:8808", site.host)
    (workdir / "plan.yaml").write_text(plan)


def finish(run_cli: Any, env: dict[str, str], thread: str) -> dict[str, Any]:
    """Approve the review when it is asked, resume until the run ends: the final view."""
    for _ in range(6):
        view = run_cli("status", thread, "--json", env=env).json()
        if view["status"] in ("done", "failed"):
            return dict(view)
        if any(p["step_id"] == "publish" for p in view["pending"]):
            assert run_cli("approve", thread, "--step", "publish", env=env).code == 0
        resumed = run_cli("resume", thread, "--json", *TOOLS, env=env)
        assert "Traceback" not in resumed.stderr, resumed.stderr
    raise AssertionError(f"the run did not end: {view['status']}")


def check_once(workdir: Path, site: Site, view: dict[str, Any]) -> None:
    assert view["status"] == "done", view.get("failure")
    assert [p["title"] for p in site.posts.values()] == [GOOD["title"]]
    index = json.loads((workdir / "site-index.json").read_text())
    assert index == [{"title": GOOD["title"], "url": "/posts/1"}]
    [note] = [json.loads(x) for x in (workdir / "outbox.jsonl").read_text().splitlines()]
    assert (note["channel"], note["message"]) == ("team", GOOD["title"])


def test_the_pipeline_sends_a_draft_back_asks_a_person_and_publishes_once(
    run_cli: Any, workdir: Path, site: Site
) -> None:
    copy_example(workdir, site)
    with FakeOpenAI(script=[Reply(json=SENT_BACK)], default=Reply(json=GOOD)) as api:
        env = env_of(api, site)
        run = run_cli("run", "--plan", "plan.yaml", *TOOLS, "--thread-id", "q3", "--json", env=env)
        assert run.code == 3, run.stderr  # waits for the review
        [question] = run.json()["pending"]
        assert question["step_id"] == "publish"
        # The person sees what will be posted, not ${draft.body}.
        assert GOOD["body"] in json.dumps(question["resolved"])
        assert site.requests == 0
        assert len(api.requests) == 2  # the first draft failed its rule check, sent back
        assert "TODO" in json.dumps(api.requests[1])  # the findings reach the model
        view = finish(run_cli, env, "q3")
    check_once(workdir, site, view)
    assert site.requests == 1
    assert len(api.requests) == 2


KILLS = [
    pytest.param({"ONWARD_FAULT_KILL": "after_effect:draft"}, id="draft-answered-not-recorded"),
    pytest.param({"ONWARD_FAULT_KILL": "after_record:draft"}, id="draft-recorded-not-saved"),
    pytest.param({"ONWARD_FAULT_KILL": "after_answers:publish"}, id="approved-not-saved"),
    pytest.param({"ONWARD_FAULT_KILL": "after_effect:publish"}, id="posted-not-recorded"),
    pytest.param({"ONWARD_FAULT_KILL": "after_record:publish"}, id="posted-recorded-not-saved"),
    pytest.param({"ONWARD_FAULT_KILL": "before_verify:index"}, id="indexed-not-verified"),
    pytest.param({"ONWARD_FAULT_KILL": "after_effect:notify"}, id="notified-not-recorded"),
]


@pytest.mark.parametrize("fault", KILLS)
def test_the_pipeline_killed_anywhere_publishes_and_notifies_once(
    run_cli: Any, workdir: Path, site: Site, fault: dict[str, str]
) -> None:
    copy_example(workdir, site)
    with FakeOpenAI(script=[Reply(json=SENT_BACK)], default=Reply(json=GOOD)) as api:
        env = env_of(api, site)
        killing = {**env, **fault}
        first = run_cli("run", "--plan", "plan.yaml", *TOOLS, "--thread-id", "q3", env=killing)
        killed = first
        if first.code == 3:  # stopped at the review before the kill point: approve, go on
            killed = run_cli("approve", "q3", "--step", "publish", *TOOLS, env=killing)
        assert killed.code == -9, (killed.code, killed.stderr[-2000:])  # SIGKILLed itself
        view = finish(run_cli, env, "q3")
    check_once(workdir, site, view)
    # A draft the model gave and the ledger recorded is not asked for again.
    assert len(api.requests) <= 3
    if fault["ONWARD_FAULT_KILL"] != "after_effect:draft":
        assert len(api.requests) == 2
