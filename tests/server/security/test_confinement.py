"""Issue 17, confinement gaps: every path an API run touches (tool args, checks, globs, the
template planner, inputs) stays inside the server's work directory after resolving symlinks.

Each attack is a request a token holder could send. Each asserts the refusal, that the
secret beside the work directory appears nowhere the attacker can read (the response, the
thread state, the run view) and that nothing new exists outside. One server per backend
serves the whole module (every attack on its own thread), so the suite stays fast.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from onward import Onward, RunPolicy
from onward.errors import DeterministicToolError, PlanningError
from onward.planning.templates import plan_from_template
from onward.policies.confine import confine, glob, locate
from onward.verification.checks import CheckContext, FileCount, JsonPath, evaluate
from tests.support.common import BACKENDS, postgres_schema
from tests.support.security import TOKENS, auth, start
from tests.support.serve import serve

# One worker runs this file: its module-scoped `srv` fixture starts a real server,
# which other workers would start again (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_confinement")

SECRET = "TOP-SECRET-42"
LEAVES = "leaves the run's work directory"


@dataclass
class Server:
    client: httpx.Client
    workdir: Path
    outside: Path
    before: dict[str, bytes]

    def outside_unchanged(self) -> None:
        assert _tree(self.outside) == self.before, "something changed outside the workdir"

    def no_leak(self, tid: str, *responses: httpx.Response) -> str:
        """Everything the attacker can read about the thread, which must not hold the
        secret; returned (as text) for further assertions."""
        seen = [r.text for r in responses]
        seen.append(self.client.get(f"/threads/{tid}/state").text)
        seen.append(self.client.get(f"/onward/runs/{tid}").text)
        seen.append(self.client.post(f"/threads/{tid}/history", json={"limit": 50}).text)
        text = "\n".join(seen)
        assert SECRET not in text
        self.outside_unchanged()
        return text

    def run_steps(self, *steps: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Each step as its own declared plan over HTTP (a failed step stops its run):
        (step id → its record, all the attacker saw)."""
        records: dict[str, Any] = {}
        seen: list[str] = []
        for step in steps:
            tid, res = start(
                self.client,
                {"goal": "probe", "plan": {"steps": [step]}, "budget": {"max_replans": 0}},
            )
            assert res.status_code == 200, res.text
            seen.append(self.no_leak(tid, res))
            state = self.client.get(f"/threads/{tid}/state").json()
            records[step["id"]] = state["values"]["steps"][step["id"]]
        return records, "\n".join(seen)

    def refused_at_start(self, run_input: dict[str, Any]) -> str:
        """A run the server must refuse before it exists (422): its message."""
        tid, res = start(self.client, run_input)
        assert res.status_code == 422, res.text
        self.no_leak(tid, res)
        detail = res.json()["detail"]
        assert isinstance(detail, str)
        return detail


def _tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture(scope="module", params=BACKENDS)
def srv(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """One real ``onward serve`` per backend for the module, the attacker's client, and a
    directory beside the work directory holding the secret."""
    base = tmp_path_factory.mktemp("confine")
    workdir, outside = base / "work", base / "outside"
    workdir.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    (outside / "secret.json").write_text(json.dumps({"password": SECRET}))
    (outside / "orders.csv").write_text(f"{SECRET},amount\nx,1\n")
    (workdir / "docs").mkdir()
    (workdir / "docs" / "readme.txt").write_text("inside")
    (workdir / "orders.csv").write_text("order_id,amount,order_time\n1,5,2024-01-01\n")
    (workdir / "in.txt").write_text("ok")
    # Symlinks inside that point outside (a file, a directory), and a directory that mixes
    # its own file with one.
    os.symlink(outside / "secret.txt", workdir / "link-secret.txt")
    os.symlink(outside, workdir / "link-dir", target_is_directory=True)
    (workdir / "mixed").mkdir()
    (workdir / "mixed" / "own.txt").write_text("mine")
    os.symlink(outside / "secret.json", workdir / "mixed" / "leak.json")
    store: AbstractContextManager[str] = (
        postgres_schema()
        if request.param == "postgres"
        else nullcontext(f"sqlite:///{base / 'store' / 'onward.db'}")
    )
    with (
        store as db_url,
        serve(db_url, workdir, ONWARD_API_TOKENS=TOKENS) as url,
        httpx.Client(base_url=url, headers=auth(), timeout=60) as client,
    ):
        yield Server(client, workdir, outside, _tree(outside))


def _failed_with(record: dict[str, Any]) -> str:
    assert record["status"] != "done", record
    text = json.dumps(record)
    assert LEAVES in text, record
    return text


def _findings(record: dict[str, Any]) -> list[str]:
    return list(record.get("findings") or [record["failure"]["message"]])


# -- checks --------------------------------------------------------------------------------


def test_json_path_on_an_outside_file_fails_without_its_value(srv: Server) -> None:
    outside_json = str(srv.outside / "secret.json")
    steps, _seen = srv.run_steps(
        {
            "id": "rel",
            "tool": "noop",
            "checks": [
                {
                    "check": "json_path",
                    "file": "../outside/secret.json",
                    "path": "password",
                    "equals": "x",
                }
            ],
        },
        {
            "id": "abs",
            "tool": "noop",
            "checks": [
                {"check": "json_path", "file": outside_json, "path": "password", "equals": "x"}
            ],
        },
    )
    for sid in ("rel", "abs"):
        _failed_with(steps[sid])
        assert _findings(steps[sid])[0].startswith("json_path: path ")


def test_matches_file_exists_non_empty_and_file_count_are_no_oracle(srv: Server) -> None:
    """Whether the outside file exists, or holds the pattern, the outcome is the same."""

    def one(check: dict[str, Any]) -> dict[str, Any]:
        return {"id": "s", "tool": "noop", "checks": [check]}

    def outcome(check: dict[str, Any], path: str) -> tuple[str, list[str]]:
        steps, _seen = srv.run_steps(one(check))
        rec = steps["s"]
        _failed_with(rec)
        return rec["status"], [f.replace(repr(path), "P") for f in _findings(rec)]

    secret, missing = "../outside/secret.txt", "../outside/no-such-file.txt"
    cases = [
        ("matches", {"check": "matches", "path": secret, "pattern": "TOP-SECRET"}, secret),
        ("matches", {"check": "matches", "path": secret, "pattern": "NOT-THERE"}, secret),
        ("matches", {"check": "matches", "path": missing, "pattern": "x"}, missing),
        ("file_exists", {"check": "file_exists", "path": secret}, secret),
        ("file_exists", {"check": "file_exists", "path": missing}, missing),
        ("non_empty", {"check": "non_empty", "path": secret}, secret),
        ("non_empty", {"check": "non_empty", "path": missing}, missing),
        ("file_count", {"check": "file_count", "path": "../outside", "min": 1}, "../outside"),
        ("file_count", {"check": "file_count", "path": "../nowhere", "min": 1}, "../nowhere"),
    ]
    by_kind: dict[str, set[tuple[str, tuple[str, ...]]]] = {}
    for kind, check, path in cases:
        status, findings = outcome(check, path)
        assert findings[0].startswith(f"{kind}: path P {LEAVES}"), findings
        by_kind.setdefault(kind, set()).add((status, tuple(findings)))
    assert all(len(outcomes) == 1 for outcomes in by_kind.values()), by_kind
    # A glob that climbs out of a confined directory is refused too.
    steps, _seen = srv.run_steps(
        one({"check": "file_count", "path": ".", "glob": "../outside/*", "min": 1})
    )
    assert _findings(steps["s"])[0].startswith(f"file_count: pattern '../outside/*' {LEAVES}")


def test_a_symlink_inside_that_points_outside_is_outside(srv: Server) -> None:
    steps, _seen = srv.run_steps(
        {"id": "read", "tool": "read_file", "args": {"path": "link-secret.txt"}},
        {"id": "read-dir", "tool": "read_file", "args": {"path": "link-dir/secret.txt"}},
        {"id": "list-link", "tool": "list_dir", "args": {"path": "link-dir"}},
        {
            "id": "check",
            "tool": "noop",
            "checks": [
                {
                    "check": "json_path",
                    "file": "link-dir/secret.json",
                    "path": "password",
                    "equals": "x",
                },
                {"check": "matches", "path": "link-secret.txt", "pattern": "TOP"},
            ],
        },
        {"id": "copy", "tool": "copy_file", "args": {"src": "link-secret.txt", "dst": "c.txt"}},
        {
            # Done only if the listing is exactly the directory's own file.
            "id": "list",
            "tool": "list_dir",
            "args": {"path": "mixed", "pattern": "*"},
            "checks": [{"check": "equals", "field": "files", "value": ["mixed/own.txt"]}],
        },
    )
    for sid in ("read", "read-dir", "list-link", "check", "copy"):
        _failed_with(steps[sid])
    assert len(_findings(steps["check"])) == 2
    assert not (srv.workdir / "c.txt").exists()
    # A listing leaves out what resolves outside; what is inside is still listed.
    assert steps["list"]["status"] == "done", steps["list"]


def test_list_dir_patterns_cannot_climb_out(srv: Server) -> None:
    steps, seen = srv.run_steps(
        {"id": "etc", "tool": "list_dir", "args": {"path": ".", "pattern": "../../../etc/host*"}},
        {"id": "out", "tool": "list_dir", "args": {"path": "docs", "pattern": "../../outside/*"}},
        {"id": "deep", "tool": "list_dir", "args": {"path": ".", "pattern": "**/../../*"}},
        {"id": "abs", "tool": "list_dir", "args": {"path": ".", "pattern": "/etc/*"}},
    )
    for sid in ("etc", "out", "deep", "abs"):
        _failed_with(steps[sid])
    assert "secret.txt" not in seen
    assert "etc/hosts" not in seen
    assert "passwd" not in seen


# -- the template planner and inputs -------------------------------------------------------


def test_the_template_planner_reads_nothing_outside(srv: Server) -> None:
    for goal in (
        "copy every file in /etc to backup",
        "copy every file in ../outside to backup",
        "copy every file in link-dir to backup",
        "copy every file in docs to ../outside/stolen",
        f"copy every file in docs to {srv.outside}/stolen",
    ):
        detail = srv.refused_at_start({"goal": goal})
        assert LEAVES in detail
        assert "use a path inside the work directory" in detail
        for listed in ("secret.txt", "secret.json", "hosts", "passwd"):
            assert listed not in detail
    assert not (srv.workdir / "backup").exists()


def test_an_outside_csv_header_is_never_quoted(srv: Server) -> None:
    for run_input in (
        {"goal": "Analyze ../outside/orders.csv, find abnormal orders"},
        {"goal": f"Analyze {srv.outside / 'orders.csv'} and find anomalies"},
        {"goal": "Analyze link-dir/orders.csv and find anomalies"},
        {"goal": "Analyze the orders, find anomalies", "inputs": ["../outside/orders.csv"]},
    ):
        detail = srv.refused_at_start(run_input)
        assert "outside" in detail or "inside" in detail  # says where, not what it holds
        assert "amount" not in detail  # no column list of the outside header


def test_inputs_outside_are_refused(srv: Server) -> None:
    plan = {"steps": [{"id": "n", "tool": "noop"}]}
    for name in (
        "../outside/secret.txt",
        str(srv.outside / "secret.txt"),
        "link-secret.txt",
        "link-dir/secret.txt",
    ):
        detail = srv.refused_at_start({"goal": "x", "plan": plan, "inputs": [name]})
        assert LEAVES in detail or "outside the server's work directory" in detail, detail
    # These come back inside, but only through what is outside: were they followed, the
    # outcome would tell whether ../outside is a directory, secret.txt a file, nothing
    # absent. All are refused alike, before anything is looked at.
    refusals = set()
    for name in (
        "../outside/../work/in.txt",
        "../outside/secret.txt/../../work/in.txt",
        "../outside/nothing/../../work/in.txt",
    ):
        detail = srv.refused_at_start({"goal": "x", "plan": plan, "inputs": [name]})
        assert LEAVES in detail, detail
        refusals.add(detail.replace(repr(name), "P"))
    assert len(refusals) == 1, refusals
    # The same input inside is fine.
    tid, res = start(srv.client, {"goal": "x", "plan": plan, "inputs": ["in.txt"]})
    assert res.status_code == 200, res.text
    srv.no_leak(tid, res)


# -- the plan node, the confine helper ------------------------------------------------------


def test_the_plan_node_plans_confined_too(ow: Onward, workdir: Path) -> None:
    """A directory swapped for a symlink after the fail-fast check: the plan node (inside
    the graph) refuses it as well."""
    outside = workdir.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    (workdir / "src").mkdir()
    (workdir / "src" / "a.txt").write_text("a")
    tid = ow.start(
        "copy every file in src to backup", workdir=workdir, policy=RunPolicy(confine_paths=True)
    )
    (workdir / "src" / "a.txt").unlink()
    (workdir / "src").rmdir()
    os.symlink(outside, workdir / "src", target_is_directory=True)
    view = ow.drive(tid)
    state = ow.state(tid)
    assert state.failure is not None
    assert LEAVES in state.failure.message
    assert SECRET not in json.dumps(state.model_dump(mode="json"), default=str)
    assert not state.plan.steps
    assert view.status.value == "failed"
    assert not (workdir / "backup").exists()
    # Unconfined (the store owner's CLI run), the same goal plans from the symlink as before.
    _goal, plan = plan_from_template("copy every file in src to backup", workdir, [])
    assert [s.args["src"] for s in plan.steps] == ["src/secret.txt"]


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "sub").mkdir(parents=True)
    out.mkdir()
    (work / "a.txt").write_text("a")
    (work / "sub" / "b.txt").write_text("b")
    (out / "s.txt").write_text(SECRET)
    os.symlink(out / "s.txt", work / "to-secret.txt")
    os.symlink(out, work / "to-out", target_is_directory=True)
    os.symlink(work / "a.txt", work / "to-a.txt")
    return work, out


def test_confine_resolves_inside_paths(tree: tuple[Path, Path]) -> None:
    work, _out = tree
    real = work.resolve()
    assert confine(work, "a.txt") == real / "a.txt"
    assert confine(work, "sub/../a.txt") == real / "a.txt"
    assert confine(work, str(work / "sub" / "b.txt")) == real / "sub" / "b.txt"
    assert confine(work, ".") == real
    assert confine(work, "to-a.txt") == real / "a.txt"  # a symlink that stays inside
    assert confine(work, "new/file.txt") == real / "new" / "file.txt"  # need not exist


@pytest.mark.parametrize(
    "path",
    [
        "../out/s.txt",  # ..
        "..",
        "sub/../../out/s.txt",
        "../work/a.txt",  # climbs out, even if it comes back
        "../out/s.txt/../../work/a.txt",
        "/etc/passwd",  # absolute
        "to-secret.txt",  # symlink escape (file)
        "to-out/s.txt",  # symlink escape (directory)
        "to-out/missing.txt",  # ... whether the target exists or not
        "to-out",
    ],
)
def test_confine_refuses_escapes_without_saying_more(tree: tuple[Path, Path], path: str) -> None:
    work, out = tree
    with pytest.raises(DeterministicToolError) as caught:
        confine(work, path, what="path")
    message = str(caught.value)
    assert message == (
        f"path {path!r} {LEAVES}; use a path inside the work directory "
        "(relative, with no .. or symlink that leads out of it)"
    )
    assert caught.value.hint == "use a path inside the work directory"
    assert str(out) not in message.replace(path, "")  # never where a symlink points


def test_confine_refuses_an_absolute_path_outside_and_one_through_the_real_workdir(
    tree: tuple[Path, Path],
) -> None:
    work, out = tree
    with pytest.raises(DeterministicToolError, match=LEAVES):
        confine(work, str(out / "s.txt"))
    with pytest.raises(DeterministicToolError, match=LEAVES):
        confine(work, str(work / ".." / "out" / "s.txt"))
    assert confine(work, str(work.resolve() / "a.txt")) == work.resolve() / "a.txt"


def test_locate_unconfined_joins_as_before(tree: tuple[Path, Path]) -> None:
    work, out = tree
    assert locate(work, "../out/s.txt", confined=False) == work / "../out/s.txt"
    assert locate(work, str(out), confined=False) == out
    with pytest.raises(DeterministicToolError):
        locate(work, "../out/s.txt", confined=True)


@pytest.mark.parametrize("pattern", ["../*", "../out/*", "sub/../../*", "**/../*", "/etc/*"])
def test_glob_refuses_patterns_that_climb_out(tree: tuple[Path, Path], pattern: str) -> None:
    work, _out = tree
    with pytest.raises(DeterministicToolError, match=f"pattern .* {LEAVES}"):
        glob(work, work, pattern, confined=True)


def test_glob_leaves_out_matches_that_resolve_outside(tree: tuple[Path, Path]) -> None:
    work, _out = tree
    names = {p.relative_to(work).as_posix() for p in glob(work, work, "**/*", confined=True)}
    assert "to-secret.txt" not in names
    assert "to-out" not in names
    assert {"a.txt", "sub/b.txt", "to-a.txt"} <= names
    unconfined = {p.name for p in glob(work, work, "*", confined=False)}
    assert "to-secret.txt" in unconfined  # the owner's own runs: as before


def test_checks_refuse_outside_paths_only_when_confined(tree: tuple[Path, Path]) -> None:
    work, out = tree
    (out / "s.json").write_text(json.dumps({"password": SECRET}))
    confined = CheckContext(work, {}.__getitem__, confined=True)
    free = CheckContext(work, {}.__getitem__)
    leak = JsonPath(file="../out/s.json", path="password", equals="x")
    (finding,) = evaluate(leak, None, confined)
    assert finding.startswith(f"json_path: path '../out/s.json' {LEAVES}")
    assert SECRET not in finding
    assert evaluate(leak, None, free) == [f"json_path: password is {SECRET!r}, expected 'x'"]
    assert evaluate(FileCount(path=".", glob="*.txt", min=3), None, confined) == [
        "file_count of ./*.txt: expected at least 3, got 2"  # a.txt, to-a.txt
    ]
    assert evaluate(FileCount(path=".", glob="*.txt", equals=3), None, free) == []


def test_the_template_planner_refuses_when_confined_and_not_otherwise(
    tree: tuple[Path, Path],
) -> None:
    work, out = tree
    (out / "orders.csv").write_text(f"{SECRET},amount\n")
    with pytest.raises(PlanningError) as caught:
        plan_from_template("Analyze ../out/orders.csv, find anomalies", work, [], confined=True)
    assert LEAVES in str(caught.value)
    assert SECRET not in str(caught.value)
    with pytest.raises(PlanningError, match=SECRET):  # the owner's run: the header, as before
        plan_from_template("Analyze ../out/orders.csv, find anomalies", work, [])
    with pytest.raises(PlanningError, match=f"input '../out/s.txt' {LEAVES}"):
        plan_from_template("copy every file in sub to bak", work, ["../out/s.txt"], confined=True)
    _goal, plan = plan_from_template("copy every file in . to bak", work, [], confined=True)
    assert sorted(s.args["src"] for s in plan.steps) == ["./a.txt", "./to-a.txt"]


def test_a_model_planned_for_each_sees_only_files_inside_a_confined_run(tmp_path: Path) -> None:
    from onward.llm.planner import DraftStep, PlanDraft, normalise
    from onward.tools.registry import default_registry

    work, out = tmp_path / "work", tmp_path / "outside"
    (work / "inbox").mkdir(parents=True)
    out.mkdir()
    (out / "secret.txt").write_text("TOP-SECRET-42")
    (work / "inbox" / "a.txt").write_text("a")
    os.symlink(out / "secret.txt", work / "inbox" / "link.txt")
    step = DraftStep(
        id="c",
        tool="copy_file",
        for_each="inbox/*",
        args_json=json.dumps({"src": "{file}", "dst": "archive/{name}"}),
    )
    confined, problems = normalise(PlanDraft(steps=[step]), default_registry, work, confined=True)
    assert problems == []
    assert [s.args["src"] for s in confined.steps] == ["inbox/a.txt"]
    owner, _ = normalise(PlanDraft(steps=[step]), default_registry, work)
    assert [s.args["src"] for s in owner.steps] == ["inbox/a.txt", "inbox/link.txt"]
