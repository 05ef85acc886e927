"""What a newcomer meets first, through the face they meet it in: ``onward resume`` and
``onward run --thread-id`` on a finished run, ``onward show`` at a failed step's
checkpoint, a declared plan file loaded in Python and started, the run view and the graph
in a notebook, and the docs site offline."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from onward import Onward, load_plan_file
from tests.support.common import CliResult
from tests.support.paths import ROOT

# -- resume and run on a finished run ------------------------------------------------------


def footprint(run_cli: Any, thread_id: str) -> tuple[Any, ...]:
    """What a command must leave as it was: the run's view, checkpoints and events."""
    return tuple(
        run_cli(cmd, thread_id, "--json").json() for cmd in ("status", "history", "timeline")
    )


def finished_run(run_cli: Any, workdir: Path, acceptance: str = "") -> str:
    (workdir / "plan.yaml").write_text(
        f"goal: say hi\n{acceptance}steps:\n  - {{id: a, tool: noop, args: {{value: hi}}}}\n",
        encoding="utf-8",
    )
    result = run_cli("run", "--plan", "plan.yaml", "--json")
    assert result.json()["status"] in ("done", "failed"), result.stderr
    return str(result.json()["thread_id"])


def test_resume_of_a_done_run_says_it_finished_and_drives_nothing(
    run_cli: Any, workdir: Path
) -> None:
    tid = finished_run(run_cli, workdir)
    before = footprint(run_cli, tid)
    result: CliResult = run_cli("resume", tid, env={"COLUMNS": "80"})
    assert result.code == 0
    assert result.stdout == f"run {tid} already finished: done\n"
    assert "nothing to resume" in result.stderr
    assert f"onward fork {tid} --at CHECKPOINT" in result.stderr
    assert "running" not in result.stderr  # no progress bar
    assert all(len(line) <= 80 for line in (result.stdout + result.stderr).splitlines())
    assert footprint(run_cli, tid) == before


def test_resume_of_a_failed_run_exits_with_the_failed_code(run_cli: Any, workdir: Path) -> None:
    tid = finished_run(run_cli, workdir, "acceptance:\n  - {check: file_exists, path: no.txt}\n")
    before = footprint(run_cli, tid)
    text = run_cli("resume", tid)
    assert (text.code, text.stdout) == (1, f"run {tid} already finished: failed\n")
    as_json = run_cli("resume", tid, "--json")
    assert as_json.code == 1
    assert as_json.json() == before[0]  # the run's view, as `status --json` shows it
    assert footprint(run_cli, tid) == before


def test_run_under_a_finished_runs_thread_id_says_to_use_a_new_id_or_fork(
    run_cli: Any, workdir: Path
) -> None:
    tid = finished_run(run_cli, workdir)
    before = footprint(run_cli, tid)
    result = run_cli("run", "--plan", "plan.yaml", "--thread-id", tid)
    assert result.code == 2
    message = " ".join(result.stderr.split())
    assert "resume it instead" not in message
    assert "already used by a run that finished (done)" in message
    assert "give another thread id, or none" in message
    assert f"onward fork {tid} --at CHECKPOINT" in message
    assert footprint(run_cli, tid) == before
    assert len(run_cli("list", "--json").json()) == 1


# -- a plan file, loaded in Python and started ----------------------------------------------


def test_what_load_plan_file_returns_starts_a_run(ow: Onward, workdir: Path) -> None:
    (workdir / "plan.yaml").write_text(
        "goal: say hi\nmax_concurrency: 2\n"
        "acceptance:\n  - {check: file_exists, path: plan.yaml}\n"
        "steps:\n  - {id: a, tool: noop, args: {value: hi}}\n"
        "  - {id: b, tool: noop, args: {value: ho}}\n",
        encoding="utf-8",
    )
    loaded = load_plan_file(workdir / "plan.yaml")
    goal, plan, concurrency = loaded  # still the three values it always was
    assert (loaded.goal, loaded.plan, loaded.max_concurrency) == (goal, plan, 2)
    view = ow.run(plan=loaded)
    from_path = ow.run(plan=workdir / "plan.yaml")
    assert view.status == from_path.status == "done"
    state, by_path = ow.state(view.thread_id), ow.state(from_path.thread_id)
    assert state.goal == by_path.goal == goal
    assert state.plan.model_dump(exclude={"version"}) == by_path.plan.model_dump(
        exclude={"version"}
    )
    assert state.max_concurrency == by_path.max_concurrency == 2
    plain = ow.start(plan=(goal, plan, concurrency))  # the same values as a plain tuple
    assert ow.state(plain).plan.steps == state.plan.steps


# -- show at a failed step's checkpoint -----------------------------------------------------


def test_show_says_a_failed_steps_class_and_the_route_it_takes(run_cli: Any, workdir: Path) -> None:
    tools = str(ROOT / "tests" / "support" / "failure_tools.py")
    (workdir / "plan.yaml").write_text(
        "goal: flaky once\nsteps:\n  - {id: a, tool: flaky, args: {times: 1}}\n", encoding="utf-8"
    )
    ran = run_cli("run", "--plan", "plan.yaml", "--tools", tools, "--thread-id", "t", "--json")
    assert ran.json()["status"] == "done", ran.stderr
    [at] = [
        c["checkpoint_id"]
        for c in run_cli("history", "t", "--json").json()
        if c["next"] == ["retry"]
    ]
    data = run_cli("show", "t", "--at", at, "--json").json()
    failure = data["values"]["steps"]["a"]["failure"]
    assert (failure["failure_class"], data["next"]) == ("transient", ["retry"])
    text = run_cli("show", "t", "--at", at, env={"COLUMNS": "80"})
    lines = text.stdout.splitlines()
    assert lines[:2] == ["status running · next retry", "route: a failed (transient) → retry"]
    assert lines[2].split() == ["a", "failed", "attempts", "1", "flaky", '{"times":', "1}"]
    said = " ".join(" ".join(lines[3:]).split())
    assert said == f"failure transient (TransientToolError): {failure['message']}"
    assert all(len(line) <= 80 for line in lines)


# -- a notebook: the run's report and the graph ---------------------------------------------

NOTEBOOK_CELLS = (
    "from onward import Onward\n"
    "ow = Onward('sqlite:///store.db')\n"
    "plan = {'goal': 'say hi', 'steps': [{'id': 'a', 'tool': 'noop', 'args': {'value': 'hi'}}]}\n"
    "view = ow.run(plan=plan)\n"
    "view",
    "ow.diagram(flow=True)",
    "ow.diagram()",
)


def kernel_outputs(workdir: Path) -> list[dict[str, Any]]:
    """Each cell's one display (its mime bundle), the cells run in a real Jupyter kernel."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in NOTEBOOK_CELLS])
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={}).execute(cwd=workdir)
    bundles = []
    for cell in nb.cells:
        [output] = cell.outputs
        bundles.append(dict(output["data"]))
    return bundles


def test_a_notebook_renders_the_report_and_draws_the_flow_on_request(workdir: Path) -> None:
    from onward.graph.build import flow_mermaid, mermaid

    run, flow, whole = kernel_outputs(workdir)
    page = run["text/html"]
    report = page[page.index('<div class="onward-report">') :]
    assert report.startswith('<div class="onward-report"><p><strong>Run done</strong>: say hi')
    assert "**" not in report
    assert "|---|" not in report
    assert ">step</th>" in report
    assert '<td style="border:1px solid #d0d7de;padding:2px 6px;text-align:left">a</td>' in report
    assert page.count('<tr data-step="a" data-status="done">') == 1  # the view's own table
    assert flow["text/markdown"] == f"```mermaid\n{flow_mermaid().strip()}\n```\n"
    assert whole["text/markdown"] == f"```mermaid\n{mermaid().strip()}\n```\n"
    assert flow["text/markdown"].count("-->") + flow["text/markdown"].count(".->") < 30


# -- the docs site, offline -----------------------------------------------------------------

SCRIPT = re.compile(r"<script\b[^>]*\bsrc=\"([^\"]+)\"")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs site, built as CI builds it (``mkdocs build --strict``)."""
    built = tmp_path_factory.mktemp("docs") / "site"
    made = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(built)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    return built


def test_the_docs_site_loads_no_script_from_the_network_and_bundles_mermaid(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    sources = {(p, src) for p in pages for src in SCRIPT.findall(p.read_text(encoding="utf-8"))}
    assert not [(p, s) for p, s in sources if "//" in s], "a page loads a script from the network"
    graph = site / "concepts" / "graph" / "index.html"
    assert '<pre class="mermaid">' in graph.read_text(encoding="utf-8")
    [mermaid] = [(graph.parent / s).resolve() for p, s in sources if p == graph and "mermaid" in s]
    assert mermaid == site / "assets" / "javascripts" / "mermaid.min.js"
    assert (
        mermaid.read_text(encoding="utf-8")
        .rstrip()
        .endswith('globalThis["mermaid"] = globalThis.__esbuild_esm_mermaid_nm["mermaid"].default;')
    )
    # The theme fetches Mermaid from its CDN only when no global `mermaid` is defined.
    [bundle] = (site / "assets" / "javascripts").glob("bundle.*.min.js")
    theme = bundle.read_text(encoding="utf-8")
    assert 'typeof mermaid=="undefined"' in theme
    assert "https://unpkg.com/mermaid" in theme


def test_the_graph_page_draws_its_diagram_with_the_network_cut_off(site: Path) -> None:
    """Headless Chromium (Debian's, as tests/server/test_serve.py) with every request that is not
    a file of the site refused: the Mermaid source becomes a drawn diagram."""
    from playwright.sync_api import Route, sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Chromium is needed (.ci/run installs Debian's chromium)"
    refused: list[str] = []

    def offline(route: Route) -> None:
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()
        page.route("**/*", offline)
        page.goto((site / "concepts" / "graph" / "index.html").as_uri())
        drawn = page.locator("div.mermaid")  # the theme draws into its closed shadow root
        drawn.wait_for(timeout=30_000)
        box = drawn.bounding_box()
        source_left = page.locator("pre.mermaid").count()
        browser.close()
    assert box is not None
    assert box["height"] > 100
    assert source_left == 0
    assert not [u for u in refused if "mermaid" in u]
