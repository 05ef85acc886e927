"""A React page on LangGraph's ``useStream`` hook (tests/server/web: Vite + React +
``@langchain/langgraph-sdk`` from npm), built with Vite, served from a loopback static
server and driven in headless Chromium against a real ``onward serve`` (both store
backends, one and two server processes): a batched approval answered unkeyed, a
follow-up message, and a cancel.
Screenshots of each stage go to ``$ONWARD_ARTIFACTS`` (else ``$ONWARD_TEST_ARTIFACTS``,
else ``test-artifacts/`` at the repository root, git-ignored). ``.ci/run`` installs the
page's packages with ``npm ci``; the test builds it once per session."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_sync_client

from tests.support.hitl_tools import rows
from tests.support.serve import serve
from tests.support.serve_api import chain, wait_until
from tests.support.web import artifacts, static_site

CONFIG = """
assistants:
  onward:
    description: asks before every step
    policy: {approve_all: true}
  quick:
    description: runs without asking
"""


def labels(workdir: Path) -> list[str]:
    """The record tool's calls so far, by label."""
    return [r["label"] for r in rows(workdir, "calls.jsonl")]


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_usestream_page_approves_a_wave_follows_up_and_cancels(
    page_dist: Path, db_url: str, workdir: Path, processes: str
) -> None:
    """With two server processes the page's requests (the browser keeps several
    connections) may land on either: its answers, its cancel of a run the other drives."""
    from playwright.sync_api import Page, expect, sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Chromium is needed (.ci/run installs Debian's chromium)"
    shots = artifacts(f"{db_url.split(':')[0]}-x{processes}:")
    (workdir / "inbox").mkdir()
    for name in ("a", "b", "c"):
        (workdir / "inbox" / f"{name}.txt").write_text(f"file {name}\n")
    config = workdir.parent / "serve.yaml"
    config.write_text(CONFIG)

    def send(page: Page, text: str, plan: dict[str, Any] | None = None) -> None:
        page.fill("#draft", text)
        if plan is not None:
            page.fill("#plan", json.dumps(plan))
        page.click("#send")

    with (
        static_site(page_dist) as origin,
        serve(
            db_url,
            workdir,
            *("--config", str(config), "--cors-origin", origin, "--processes", processes),
        ) as api,
        sync_playwright() as p,
    ):
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1100, "height": 1400})
        page.goto(f"{origin}/?api={api}")

        # The goal is planned by the copy template; approve_all asks about all three
        # steps of the wave in ONE interrupt.
        send(page, "Copy the files in inbox to archive")
        questions = page.locator("#interrupt .question")
        expect(questions).to_have_count(3, timeout=30_000)
        for name in ("a", "b", "c"):
            expect(questions.filter(has_text=f"inbox/{name}.txt")).to_have_count(1)
        expect(page.locator(".message.human").first).to_contain_text("inbox to archive")
        page.screenshot(path=str(shots / "1-three-questions.png"), full_page=True)
        assert not (workdir / "archive").exists()

        # "Approve all": one unkeyed decision per question.
        page.click("#approve-all")
        expect(page.locator(".message.tool")).to_have_count(3, timeout=30_000)
        expect(page.locator("#status")).to_have_text("idle", timeout=30_000)
        expect(page.locator(".tool-call", has_text="copy_file")).to_have_count(3)
        final = page.locator(".message.ai").last
        expect(final).to_contain_text("archive")
        expect(final).to_contain_text("|")  # the Markdown table of the steps
        expect(page.locator("#interrupt")).to_have_count(0)
        expect(page.locator("#error")).to_have_count(0)
        page.screenshot(path=str(shots / "2-copied.png"), full_page=True)
        for name in ("a", "b", "c"):
            assert (workdir / "archive" / f"{name}.txt").read_text() == f"file {name}\n"

        # A follow-up message on the finished thread is the next goal: planned, asked again.
        send(page, "Copy the files in archive to backup")
        expect(questions).to_have_count(3, timeout=30_000)
        for name in ("a", "b", "c"):
            expect(questions.filter(has_text=f"archive/{name}.txt")).to_have_count(1)
        page.screenshot(path=str(shots / "3-follow-up-asks.png"), full_page=True)
        assert not (workdir / "backup").exists()

        # Cancel on a new thread of an assistant that does not ask: slow steps one after
        # the other; the run stops after the step that was running.
        page.goto(f"{origin}/?api={api}&assistant=quick")
        send(page, "record a b c", plan=chain("a", "b", "c", seconds=1.5)["plan"])
        expect(page.locator("#status")).to_have_text("running")
        page.screenshot(path=str(shots / "4-running.png"), full_page=True)
        wait_until("step a to start", lambda: rows(workdir, "calls.jsonl"))
        started = labels(workdir)  # the step running as the cancel is sent (a, on most hosts)
        page.click("#cancel")
        expect(page.locator("#status")).to_have_text("idle", timeout=30_000)
        ran = labels(workdir)
        # The running step ends, no other starts (one more only if it started between the
        # read and the click).
        assert ran == ["a", "b", "c"][: len(ran)]
        assert len(started) <= len(ran) <= len(started) + 1, (started, ran)
        # The thread's state after the cancel, not only the plan: the steps that ran (their
        # effects happened) show their tool call and result.
        expect(page.locator(".message.tool")).to_have_count(len(ran), timeout=30_000)
        expect(page.locator(".tool-call", has_text="record")).to_have_count(len(ran))
        tid = page.locator("#thread").inner_text()
        time.sleep(2.0)  # longer than a step: nothing more runs
        expect(page.locator("#error")).to_have_count(0)
        page.screenshot(path=str(shots / "5-cancelled.png"), full_page=True)
        browser.close()
        assert labels(workdir) == ran
        client = get_sync_client(url=api, api_key=None)
        assert client.runs.list(tid)[0]["status"] == "interrupted"
    assert (shots / "2-copied.png").stat().st_size > 5_000
