"""The template planner: rules that turn known goals (English or Chinese) into plans.

Two templates: order-anomaly analysis of a CSV, and copying a directory's files
(one step per file). Planning reads the file system (the CSV header, the
directory listing) so a plan is concrete and checkable before anything runs. A confined
run's planning reads only inside its work directory (onward.policies.confine): every input and every
path the goal names is refused before it is looked at when it leaves it.
"""

from __future__ import annotations

import re
from pathlib import Path

from onward.errors import NoTemplateError, PlanningError
from onward.model.state import Goal, Plan, PlanSource, PlanStep
from onward.policies import confine
from onward.tools.orders import (
    REQUIRED_FIELDS,
    detect_fields,
    missing_field_message,
    not_utf8_csv,
    read_header,
)
from onward.tools.orders import report_checks as _report_checks
from onward.verification.checks import FileCount, FileExists

_ANALYZE = re.compile(r"(analy[sz]e|anomal|abnormal|outlier|audit|分析|异常|汇总)", re.IGNORECASE)
_CSV_NAME = re.compile(r"([\w./\\-]+\.csv)\b", re.IGNORECASE)
_COPY_EN = re.compile(
    r"\b(?:copy|sync|mirror|back ?up)\b.*?\b(?:in|from)\s+['\"]?(?P<src>[^\s'\"]+?)/?['\"]?"
    r"\s+(?:to|into)\s+['\"]?(?P<dst>[^\s'\"]+?)/?['\"]?\s*[.!]?$",
    re.IGNORECASE,
)
_COPY_ZH = re.compile(
    r"把\s*(?P<src>[^\s，,]+?)\s*(?:目录|文件夹)?\s*(?:里|中|下|内)?的?\s*(?:所有|全部)?\s*文件\s*"
    r"(?:同步|复制|拷贝|备份)(?:到|至)\s*(?P<dst>[^\s，,。]+?)\s*(?:目录|文件夹)?\s*[。.]?$"
)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-").lower() or "file"


def plan_from_template(
    objective: str, workdir: Path, inputs: list[str], *, confined: bool = False
) -> tuple[Goal, Plan]:
    """A plan for a goal the rules know; PlanningError says what to do otherwise.

    ``confined`` (the run's policy ``confine_paths``): every input, and every path the goal
    names, must stay inside ``workdir``; one that leaves it is a PlanningError that says
    so before anything outside is looked at (its existence, listing or header)."""
    place = _Locator(workdir, confined)
    for name in inputs:
        place(name, "input")
    text = objective.strip()
    m = _COPY_EN.search(text) or _COPY_ZH.search(text)
    if m:
        return _copy_plan(text, m.group("src"), m.group("dst"), place)
    csv_inputs = [i for i in inputs if i.lower().endswith(".csv")]
    named = _CSV_NAME.findall(text)
    if _ANALYZE.search(text) and (csv_inputs or named):
        return _orders_plan(text, (csv_inputs or named)[0], place)
    raise NoTemplateError(
        f"no built-in template matches the goal {objective!r}. Built-in templates: "
        "'Analyze orders.csv, find abnormal orders and give me a summary' (with --input FILE.csv) "
        "and 'copy every file in SRC/ to DST/'. Pass a declared plan with --plan FILE, or "
        "configure a model (OPENAI_API_KEY, OPENAI_BASE_URL, ONWARD_MODEL) to plan it"
    )


class _Locator:
    """Where a path the planner reads is, under the run's confinement (onward.policies.confine)."""

    def __init__(self, workdir: Path, confined: bool) -> None:
        self.workdir, self.confined = workdir, confined

    def __call__(self, path: str, what: str) -> Path:
        return confine.planning_path(self.workdir, path, confined=self.confined, what=what)


def _orders_plan(objective: str, csv_path: str, place: _Locator) -> tuple[Goal, Plan]:
    workdir = place.workdir
    file = place(csv_path, "input file")
    if not file.is_file():
        raise PlanningError(
            f"input file {csv_path} not found (looked in {workdir}); check the --input path"
        )
    if (why := not_utf8_csv(str(file), csv_path)) is not None:
        raise PlanningError(why)
    header = read_header(str(file))
    if not header:
        raise PlanningError(f"{csv_path} is empty: it has no header row. Pass a CSV with data")
    fields = detect_fields(header)
    missing = [f for f in REQUIRED_FIELDS if f not in fields]
    if missing:
        raise PlanningError(missing_field_message(csv_path, missing, header))
    report = str(Path(csv_path).with_name(Path(csv_path).stem + "-report.md"))
    steps = [
        PlanStep(
            id="read",
            tool="read_csv",
            args={"path": csv_path},
            output="table",
            description=f"read {csv_path}",
        ),
        PlanStep(
            id="validate",
            tool="validate_fields",
            args={"table": "${table}"},
            depends_on=["read"],
            output="validation",
            description="map columns and report malformed rows",
        ),
        PlanStep(
            id="detect",
            tool="find_anomalies",
            args={"table": "${table}", "validation": "${validation}"},
            depends_on=["read", "validate"],
            output="anomalies",
            description="apply the anomaly rules",
        ),
        PlanStep(
            id="aggregate",
            tool="aggregate",
            args={"table": "${table}", "validation": "${validation}", "anomalies": "${anomalies}"},
            depends_on=["read", "validate", "detect"],
            output="summary",
            description="count per rule and per group",
        ),
        PlanStep(
            id="report",
            tool="render_report",
            args={
                "path": report,
                "source": csv_path,
                "validation": "${validation}",
                "anomalies": "${anomalies}",
                "summary": "${summary}",
            },
            depends_on=["validate", "detect", "aggregate"],
            output="report",
            checks=_report_checks("${args.path}"),  # follows an edited path
            description=f"write {report}",
        ),
    ]
    goal = Goal(objective=objective, inputs=[csv_path], acceptance=[FileExists(path=report)])
    return goal, Plan(source=PlanSource.TEMPLATE, steps=steps)


def _copy_plan(objective: str, src: str, dst: str, place: _Locator) -> tuple[Goal, Plan]:
    workdir = place.workdir
    source = place(src, "source directory")
    place(dst, "destination directory")
    if not source.is_dir():
        raise PlanningError(f"source directory {src} not found (looked in {workdir})")
    # Confined, a file that is a symlink pointing outside is left out, like a glob's match.
    files = sorted(
        p.name
        for p in source.iterdir()
        if p.is_file() and (not place.confined or confine.inside(workdir, p))
    )
    if not files:
        raise PlanningError(f"source directory {src} has no files to copy")
    steps, used = [], set()
    for name in files:
        step_id = f"copy-{_slug(name)}"
        while step_id in used:
            step_id += "-x"
        used.add(step_id)
        target = f"{dst}/{name}"
        steps.append(
            PlanStep(
                id=step_id,
                tool="copy_file",
                args={"src": f"{src}/{name}", "dst": target},
                checks=[FileExists(path="${args.dst}")],  # follows an approved edit of dst
                description=f"copy {name}",
            )
        )
    # One file a copy: a copy a person skips is one file fewer to expect.
    count = FileCount(path=dst, min=len(files), steps=[s.id for s in steps])
    goal = Goal(objective=objective, acceptance=[count])
    return goal, Plan(source=PlanSource.TEMPLATE, steps=steps)
