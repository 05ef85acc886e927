"""Plan validation: every problem at once, each with its location.

Whatever made a plan (a file, the template rules, a model), it passes through
here before it runs: known tools, args valid for the tool's schema, unique ids,
known dependencies, no cycles, every referenced artifact produced upstream,
known check kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from onward.errors import DeterministicToolError, PlanProblem, PlanValidationError
from onward.model import references
from onward.model.state import Goal, Plan, PlanSource, PlanStep, PlanSteps, SideEffect
from onward.planning.limits import Cleaner, clean_value, plan_size_problem, step_count_problem
from onward.policies import egress
from onward.tools.registry import Registry, ToolSpec
from onward.verification.checks import CHECK_KINDS, arg_names, artifact_names


def _loc(parts: tuple[int | str, ...]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def pydantic_problems(prefix: str, exc: ValidationError) -> list[PlanProblem]:
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if p not in CHECK_KINDS)
        where = ".".join(p for p in (prefix, _loc(loc)) if p) or "(top)"
        if err["type"] == "union_tag_invalid":
            tag = (err.get("ctx") or {}).get("tag")
            msg = f"unknown check kind {tag!r}; known kinds: {', '.join(CHECK_KINDS)}"
        elif err["type"] == "union_tag_not_found":
            msg = f"a check needs a 'check' kind, one of: {', '.join(CHECK_KINDS)}"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling"
        else:
            msg = err["msg"].removeprefix("Value error, ")
        problems.append(PlanProblem(where, msg))
    return problems


def parse_declared(
    data: Any,
    registry: Registry,
    *,
    source: str = "plan",
    allow_tools: frozenset[str] | None = None,
) -> tuple[Goal, Plan, int | None]:
    """A declared plan (already parsed YAML/JSON) → validated goal, plan and max_concurrency."""
    if not isinstance(data, Mapping):
        raise PlanValidationError(
            [PlanProblem("(top)", "a plan must be a mapping with 'goal' and 'steps'")],
            source=source,
        )
    # Limits and values first (onward.planning.limits): past them, pydantic and the
    # serializers fail deep inside instead of naming the problem.
    data, problems = _clean_document(data)
    if problems:
        raise PlanValidationError(problems, source=source)
    known = {"goal", "acceptance", "steps", "max_concurrency", "constraints", "inputs"}
    problems += [
        PlanProblem(str(k), f"unknown top-level key; expected one of: {', '.join(sorted(known))}")
        for k in data
        if k not in known
    ]
    goal: Goal | None = None
    try:
        goal = Goal(
            objective=str(data.get("goal") or f"run {source}"),
            acceptance=data.get("acceptance") or [],
            constraints=data.get("constraints") or {},
            inputs=data.get("inputs") or [],
        )
    except ValidationError as exc:
        problems += pydantic_problems("", exc)
    raw_steps = data.get("steps")
    steps: list[PlanStep] = []
    broken: set[int] = set()
    if not isinstance(raw_steps, list) or not raw_steps:
        problems.append(PlanProblem("steps", "a plan needs a non-empty list of steps"))
        raw_steps = []
    for i, raw in enumerate(raw_steps):
        raw_id = raw.get("id") if isinstance(raw, Mapping) else None
        label = f"steps[{i}]" + (f" ({raw_id})" if isinstance(raw_id, str) else "")
        try:
            steps.append(PlanStep.model_validate(raw))
        except ValidationError as exc:
            problems += pydantic_problems(label, exc)
            # Keep a stand-in so later steps keep their index and may still depend on it.
            broken.add(i)
            steps.append(_stand_in(raw, i))
    max_concurrency = data.get("max_concurrency")
    if max_concurrency is not None and (
        not isinstance(max_concurrency, int) or max_concurrency < 1
    ):
        problems.append(PlanProblem("max_concurrency", "must be a positive integer"))
    plan = Plan.model_construct(source=PlanSource.DECLARED, steps=PlanSteps(steps), version=1)
    problems += plan_problems(
        plan, registry, goal, unchecked=broken, allow_tools=allow_tools, values_checked=True
    )
    if problems:
        raise PlanValidationError(problems, source=source)
    assert goal is not None
    return goal, plan, max_concurrency


def _clean_document(data: Mapping[Any, Any]) -> tuple[dict[Any, Any], list[PlanProblem]]:
    """The plan document with its values checked and cleaned (one count of values for the
    whole plan); each step's problems are located with its id."""
    cleaner = Cleaner()
    out: dict[Any, Any] = {}
    for key, value in data.items():
        if key == "steps" and isinstance(value, list):
            if (too_many := step_count_problem(value)) is not None:
                return out, [too_many]
            steps = []
            for i, raw in enumerate(value):
                raw_id = raw.get("id") if isinstance(raw, Mapping) else None
                label = f"steps[{i}]" + (f" ({raw_id})" if isinstance(raw_id, str) else "")
                steps.append(cleaner.clean(raw, label, depth=3))
            out[key] = steps
        elif isinstance(key, str):
            name = cleaner.clean(key, "(top)")
            out[name] = cleaner.clean(value, name, depth=2)
        else:
            out[key] = value  # reported as an unknown top-level key
    return out, cleaner.done()


def validate_plan(
    plan: Plan,
    registry: Registry,
    goal: Goal | None = None,
    *,
    source: str = "plan",
    allow_tools: frozenset[str] | None = None,
    values_checked: bool = False,
    max_steps: int | None = None,
) -> Plan:
    """``plan``, or a PlanValidationError listing its problems; ``max_steps``: the run's
    ``max_plan_steps``."""
    too_big = None if max_steps is None else plan_size_problem(len(plan.steps), max_steps)
    if too_big is not None:
        raise PlanValidationError([too_big], source=source)
    problems = plan_problems(
        plan, registry, goal, allow_tools=allow_tools, values_checked=values_checked
    )
    if problems:
        raise PlanValidationError(problems, source=source)
    return plan


def _stand_in(raw: Any, index: int) -> PlanStep:
    """What can be salvaged of a step that failed its schema (its own problems are reported)."""
    data = raw if isinstance(raw, Mapping) else {}

    def str_list(v: Any) -> list[str]:
        return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []

    return PlanStep.model_construct(
        id=data["id"] if isinstance(data.get("id"), str) else f"#{index}",
        tool=str(data.get("tool", "")),
        args=data["args"] if isinstance(data.get("args"), dict) else {},
        depends_on=str_list(data.get("depends_on")),
        output=data["output"] if isinstance(data.get("output"), str) else None,
        checks=[],
        description="",
    )


def plan_problems(
    plan: Plan,
    registry: Registry,
    goal: Goal | None = None,
    *,
    unchecked: frozenset[int] | set[int] = frozenset(),
    allow_tools: frozenset[str] | None = None,
    values_checked: bool = False,
) -> list[PlanProblem]:
    """Problems of a parsed plan; steps in ``unchecked`` failed their schema and only
    count as ids/outputs for the others. ``allow_tools``: the run's tool allowlist;
    ``values_checked``: the steps' values were checked already (a document's, by
    :func:`parse_declared`)."""
    problems: list[PlanProblem] = []
    if (too_many := step_count_problem(plan.steps)) is not None:
        return [too_many]
    ids: dict[str, int] = {}
    producers: dict[str, str] = {}
    for i, step in enumerate(plan.steps):
        where = f"steps[{i}] ({step.id})"
        if i not in unchecked and not values_checked:
            problems += _value_problems(step, where)
        if step.id in ids:
            problems.append(
                PlanProblem(
                    f"{where}.id",
                    f"duplicate step id {step.id!r} (first used by steps[{ids[step.id]}])",
                )
            )
        else:
            ids[step.id] = i
        if step.output:
            if step.output in producers:
                problems.append(
                    PlanProblem(
                        f"{where}.output",
                        f"artifact {step.output!r} is already produced by step "
                        f"{producers[step.output]!r}",
                    )
                )
            else:
                producers[step.output] = step.id
            if references.parse(f"${{{step.output}}}") != (step.output, ""):
                problems.append(
                    PlanProblem(
                        f"{where}.output",
                        f"output name {step.output!r} cannot be referenced as "
                        "${name}: start it with a letter or _, then letters, digits, _ or -",
                    )
                )
    by_id = {s.id: s for s in plan.steps}
    for i, step in enumerate(plan.steps):
        where = f"steps[{i}] ({step.id})"
        for dep in step.depends_on:
            if dep not in by_id:
                problems.append(
                    PlanProblem(
                        f"{where}.depends_on", f"unknown step {dep!r}; known steps: {_some(by_id)}"
                    )
                )
        if i not in unchecked:
            problems += step_problems(step, where, registry, allow_tools)
    cycle = _find_cycle(plan)
    if cycle:
        problems.append(
            PlanProblem(
                "steps",
                "dependency cycle: " + " → ".join(cycle) + "; remove one of these depends_on",
            )
        )
    else:
        problems += _reference_problems(plan, producers)
    if goal is not None:
        for j, check in enumerate(goal.acceptance):
            for name in artifact_names(check):
                if name not in producers:
                    problems.append(
                        PlanProblem(
                            f"acceptance[{j}]", f"artifact {name!r} is not produced by any step"
                        )
                    )
    return problems


def _some(names: Mapping[str, Any], limit: int = 8) -> str:
    keys = list(names)
    return ", ".join(keys[:limit]) + (", …" if len(keys) > limit else "") if keys else "(none)"


def step_problems(
    step: PlanStep, where: str, registry: Registry, allow_tools: frozenset[str] | None = None
) -> list[PlanProblem]:
    """The step's tool is known and allowed, and its args fit the tool's schema (fields
    holding a ``${ref}`` are checked when the step runs, with the real value); a
    milestone has none of these (:func:`milestone_problems`)."""
    if step.milestone is not None or not step.tool:
        return milestone_problems(step, where)
    if allow_tools is not None and step.tool not in allow_tools:
        return [
            PlanProblem(
                f"{where}.tool",
                f"tool {step.tool!r} is not allowed in this run (allowed: "
                f"{', '.join(sorted(allow_tools)) or 'none'}); use an allowed tool or start "
                "the run with a wider --allow-tools",
            )
        ]
    spec = registry.get(step.tool)
    if spec is None:
        return [
            PlanProblem(
                f"{where}.tool",
                f"unknown tool {step.tool!r}; registered tools: {', '.join(registry.names())}. "
                "Register your own with @onward.tool and pass --tools (or ONWARD_TOOLS)",
            )
        ]
    problems = [
        PlanProblem(
            f"{where}.checks[{j}]",
            f"refers to ${{args.{name}}}, but the step has no arg {name!r} (its args: "
            f"{', '.join(sorted(step.args)) or 'none'})",
        )
        for j, c in enumerate(step.checks)
        for name in sorted(arg_names(c))
        if name not in step.args
    ]
    if problems:
        return problems
    referenced = {loc.split(".")[1].split("[")[0] for loc, _, _ in references.walk(step.args)}
    try:
        spec.args_model.model_validate(step.args)
    except ValidationError as exc:
        # A field holding a ${ref} is type-checked when the step runs, with the real value.
        errors = [
            e for e in exc.errors(include_url=False) if not (e["loc"] and e["loc"][0] in referenced)
        ]
        if errors:
            return pydantic_problems(
                f"{where}.args",
                ValidationError.from_exception_data(exc.title, errors),  # type: ignore[arg-type]
            )
    return egress_problems(step, where, spec)


def milestone_problems(step: PlanStep, where: str) -> list[PlanProblem]:
    """A milestone says what is to be done and what it waits for, nothing more: its
    tools, args and checks belong to the steps the model expands it into."""
    if step.milestone is None:
        return [
            PlanProblem(
                f"{where}.tool",
                "a step needs a tool (or a milestone: what the model is to expand into "
                "steps once the steps it depends on are done)",
            )
        ]
    problems = []
    if not step.milestone.strip():
        problems.append(PlanProblem(f"{where}.milestone", "say what the milestone is to do"))
    extra = [
        name
        for name, value in (
            ("tool", step.tool),
            ("args", step.args),
            ("checks", step.checks),
            ("retry", step.retry),
            ("judge", step.judge),
        )
        if value
    ]
    if extra:
        problems.append(
            PlanProblem(
                where,
                f"a milestone has no {', '.join(extra)}: they belong to the steps the model "
                "expands it into; remove them (or make it a step without milestone)",
            )
        )
    if not step.depends_on:
        problems.append(
            PlanProblem(
                f"{where}.depends_on",
                "a milestone is expanded once the steps it depends on are done: give it "
                "depends_on (work with nothing to wait for is planned as steps up front)",
            )
        )
    return problems


def egress_problems(step: PlanStep, where: str, spec: ToolSpec) -> list[PlanProblem]:
    """A network tool's literal ``url`` the egress policy refuses: refused now, so nobody
    is asked to approve a call that cannot run (a ``${ref}`` URL is checked when the step
    runs, as every call is)."""
    url = step.args.get("url")
    if spec.service is not egress.service_of or not isinstance(url, str):
        return []
    if references.parse(url) is not None:
        return []
    method = "GET" if spec.side_effect is SideEffect.PURE else "POST"
    try:
        egress.policy_from_env().check(url, method=method)
    except DeterministicToolError as refused:
        hint = f"; {refused.hint}" if refused.hint else ""
        return [PlanProblem(f"{where}.args.url", f"{refused}{hint}")]
    return []


def request_problems(
    goal: Goal, plan: Plan | None, *, size: tuple[int, int] | None = None
) -> list[PlanProblem]:
    """Values of a run's request the store cannot hold: the goal's text (a command-line
    argument in another encoding), and ``plan``'s steps (a Plan built in Python; a plan read
    from a document was checked by :func:`parse_declared`). ``size``: (steps of the run's
    plan, its policy's ``max_plan_steps``), for a plan of any kind."""
    problems: list[PlanProblem] = []
    if size is not None and (too_big := plan_size_problem(*size)) is not None:
        return [too_big]
    clean_value(goal.objective, "goal", problems=problems)
    clean_value(list(goal.inputs), "inputs", problems=problems)
    clean_value(dict(goal.constraints), "constraints", problems=problems)
    if plan is not None:
        if (too_many := step_count_problem(plan.steps)) is not None:
            return [*problems, too_many]
        for i, step in enumerate(plan.steps):
            problems += _value_problems(step, f"steps[{i}] ({step.id})")
    return problems


def _value_problems(step: PlanStep, where: str) -> list[PlanProblem]:
    """A step's values the store cannot hold (for plans not read from a document: a
    model's draft, a Plan built in Python); see onward.planning.limits."""
    names = ("id", "tool", "args", "depends_on", "output", "milestone")
    fields = {k: getattr(step, k) for k in names}
    return clean_value({**fields, "description": step.description}, where, depth=3)[1]


def _find_cycle(plan: Plan) -> list[str] | None:
    """A dependency cycle, as ids, if there is one. Steps sharing an id (a problem of its
    own) count as one node with all their dependencies, so a duplicate cannot hide a cycle.
    Iterative: a chain of thousands of steps is no recursion."""
    deps: dict[str, list[str]] = {}
    for s in plan.steps:
        deps.setdefault(s.id, []).extend(s.depends_on)
    state: dict[str, int] = {}
    for root in deps:
        if root in state:
            continue
        state[root] = 1
        path = [root]
        stack = [iter(deps[root])]
        while stack:
            for dep in stack[-1]:
                if dep not in deps:
                    continue
                seen = state.get(dep)
                if seen == 1:
                    return [*path[path.index(dep) :], dep]
                if seen is None:
                    state[dep] = 1
                    path.append(dep)
                    stack.append(iter(deps[dep]))
                    break
            else:
                stack.pop()
                state[path.pop()] = 2
    return None


def _ancestors(plan: Plan) -> tuple[dict[str, int], dict[str, int]]:
    """Step id → its transitive dependencies as a bit set (bit n: the n-th distinct id):
    10,000 chained steps take megabytes, not the hundreds a set per step would. Returns
    (id → its bit, id → its dependencies). The plan must be acyclic; visited in dependency
    order, without recursion."""
    deps: dict[str, list[str]] = {}
    for s in plan.steps:
        deps.setdefault(s.id, []).extend(s.depends_on)
    bit = {sid: 1 << n for n, sid in enumerate(deps)}
    out: dict[str, int] = {}
    for root in deps:
        stack = [root]
        while stack:
            node = stack[-1]
            if node in out:
                stack.pop()
                continue
            todo = [d for d in deps[node] if d in deps and d not in out]
            if todo:
                stack.extend(todo)
                continue
            acc = 0
            for d in deps[node]:
                if d in deps:
                    acc |= bit[d] | out[d]
            out[node] = acc
            stack.pop()
    return bit, out


def _reference_problems(plan: Plan, producers: dict[str, str]) -> list[PlanProblem]:
    problems = []
    bit, ups = _ancestors(plan)
    for i, step in enumerate(plan.steps):
        where = f"steps[{i}] ({step.id})"
        used = [(f"{where}.{loc}", name) for loc, name, _ in references.walk(step.args)]
        used += [
            (f"{where}.checks[{j}]", name)
            for j, c in enumerate(step.checks)
            for name in artifact_names(c)
        ]
        for loc, name in used:
            producer = producers.get(name)
            if producer is None:
                problems.append(
                    PlanProblem(
                        loc,
                        f"references artifact {name!r}, which no step produces "
                        f"(known outputs: {_some(producers)})",
                    )
                )
            elif producer != step.id and not ups[step.id] & bit[producer]:
                problems.append(
                    PlanProblem(
                        loc,
                        f"references artifact {name!r} from step {producer!r}, which is not "
                        f"upstream; add {producer!r} to depends_on",
                    )
                )
    return problems
