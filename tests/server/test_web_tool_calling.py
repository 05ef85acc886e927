"""The tool-calling step driven from the ``useStream`` page (tests/server/web) in headless Chromium
against a real ``onward serve`` whose model is a loopback OpenAI-compatible server calling
tools: the unsafe call's approval card shows the tool and its resolved args, "Approve all"
answers it and the step goes on inside, and the calls render as tool calls with their
tool messages. Screenshots go where tests/server/test_web_usestream.py puts its own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support.common import read_jsonl
from tests.support.openai_fake import FakeOpenAI, Reply
from tests.support.serve import serve
from tests.support.tool_calling_serve import PLAN, TOOLS
from tests.support.web import artifacts, static_site


def test_a_usestream_page_shows_the_calls_and_the_approval_card_that_resumes_the_step(
    page_dist: Path, db_url: str, workdir: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Chromium is needed (.ci/run installs Debian's chromium)"
    shots = artifacts(db_url)
    with FakeOpenAI() as api:
        api.script = [
            Reply(tool_name="lookup", tool_args={"key": "revenue"}),
            Reply(tool_name="publish", tool_args={"title": "Revenue up"}),
            Reply(text="Published the revenue."),
        ]
        env = {"OPENAI_API_KEY": "x", "OPENAI_BASE_URL": api.base_url}
        with (
            static_site(page_dist) as origin,
            serve(db_url, workdir, "--tools", TOOLS, "--cors-origin", origin, **env) as url,
            sync_playwright() as p,
        ):
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1100, "height": 1400})
            page.goto(f"{origin}/?api={url}")
            page.fill("#draft", "publish the revenue")
            page.fill("#plan", json.dumps(PLAN))
            page.click("#send")

            # The call inside the step waits as the thread's interrupt: the card shows the
            # tool and its args as they will run; nothing is published yet.
            question = page.locator("#interrupt .question")
            expect(question).to_have_count(1, timeout=30_000)
            expect(question).to_contain_text("publish")
            expect(question).to_contain_text('{"title":"Revenue up"}')
            expect(question).to_contain_text("tool-calling step")
            page.screenshot(path=str(shots / "tool-calling-1-asks.png"), full_page=True)
            assert read_jsonl(workdir / "effects.jsonl") == []

            # The answer resumes the step inside; its calls show as tool calls.
            page.click("#approve-all")
            expect(page.locator("#status")).to_have_text("idle", timeout=30_000)
            expect(page.locator(".message.tool")).to_have_count(3, timeout=30_000)
            names = page.locator(".tool-call > code:first-of-type").all_inner_texts()
            assert names == ["lookup", "publish", "tool_calling"]
            expect(page.locator(".message.tool", has_text="Revenue up")).to_have_count(1)
            expect(page.locator("#interrupt")).to_have_count(0)
            expect(page.locator("#error")).to_have_count(0)
            page.screenshot(path=str(shots / "tool-calling-2-done.png"), full_page=True)
            browser.close()

    assert [e["title"] for e in read_jsonl(workdir / "effects.jsonl")] == ["Revenue up"]
    assert (shots / "tool-calling-2-done.png").stat().st_size > 5_000
