"""``model_step``: a step whose work is one model call, as a built-in tool, so the one
protocol (ledger, approvals, budgets, failure classes, verification) covers it.

Its args: an ``instruction`` (what the step must do), ``inputs`` (name → value, usually an
artifact by reference: ``${notes}``, ``${report.summary}``; execute resolves them and
checks their sha256 like any step's) and an ``output`` contract: ``"text"`` (the answer is
a string), a list of field names (an object of those string fields) or a JSON schema of an
object (onward.tools.schemas). The prompt is built by onward.llm.context.build: the
instruction pinned under the step's system prompt, every input fenced as untrusted data
and cut to the context budget, like all data that reaches a model.

Verified like any step: verify applies the output contract first (``output_findings``),
then the step's checks, then the optional judge. A finding fails the step as
``validation``; the tool's ``fix_args`` rule then sends it back to the model
(generate → evaluate → improve): the replan node bumps its ``round`` arg (a validated plan
revision, logged), and the next attempt's prompt holds the previous answer and the
findings, fenced, from the step's record (``ctx.previous``). The signal is the checks',
never the model's opinion of itself; the rounds count against ``max_replans``, and a
failure that repeats or outlasts them routes by its class as any other (a person).

The call is an ``idempotent`` effect: the effect ledger records the answer under the key
of (thread, step, args), so a run killed after the model answered resumes with that
answer and does not ask again (a model answers differently the second time); a run killed
while the model was still answering asks again, with the same key. A new round has new
args, so a new key. A refusal, or a model that cannot be asked (after onward's own
retries), fails the step as ``deterministic`` / ``transient`` with the reason; the usage
of every call, failed ones too, counts in the run's usage.
"""

from __future__ import annotations

import json
from datetime import timedelta
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from onward.errors import DeterministicToolError
from onward.model.state import FailureClass, SideEffect, StepFailure
from onward.tools.registry import ToolContext, ToolSpec, default_registry
from onward.tools.schemas import model_from_schema

Contract = Literal["text"] | list[str] | dict[str, Any]
"""``"text"``, field names, or a JSON schema of an object."""
PURPOSE = "step"
"""The ``purpose`` of a model step's ``model_call`` events."""


class TextAnswer(BaseModel):
    """The envelope a text answer is asked in (a bare answer is taken as the text too)."""

    text: str = Field(description="the answer")


class ModelStepArgs(BaseModel):
    """A model step's args (also the schema a plan is validated with)."""

    model_config = ConfigDict(extra="forbid")

    instruction: str = Field(min_length=1, description="what the step must do")
    inputs: dict[str, Any] = Field(
        default_factory=dict, description="name → value, usually ${artifact} or ${a.field}"
    )
    output: Contract = Field(
        default="text", description='"text", a list of field names, or a JSON object schema'
    )
    round: int = Field(
        default=1, ge=1, description="set by onward when the checks send an answer back"
    )

    @field_validator("output")
    @classmethod
    def _contract_is_checkable(cls, value: Contract) -> Contract:
        return checkable(value)


def checkable(value: Contract) -> Contract:
    """An output contract whose schema builds (a ValueError that says why, if not)."""
    if not isinstance(value, str):
        contract_model(json.dumps(value, sort_keys=True))
    return value


@lru_cache(maxsize=128)
def contract_model(contract: str) -> type[BaseModel]:
    """The pydantic model of a contract (given as JSON text, so it caches)."""
    value = json.loads(contract)
    if value == "text":
        return TextAnswer
    if isinstance(value, list):
        if not value or not all(isinstance(v, str) and v for v in value):
            raise ValueError("output: a list of field names must name at least one field")
        value = {
            "type": "object",
            "properties": {name: {"type": "string"} for name in value},
            "required": list(value),
        }
    try:
        return model_from_schema("ModelStepOutput", value)
    except ValueError as exc:
        raise ValueError(f"output: {exc}") from exc


def _contract_of(output: Contract) -> type[BaseModel]:
    return contract_model(json.dumps(output, sort_keys=True))


def output_findings(args: dict[str, Any], output: Any) -> list[str]:
    """What is wrong with ``output`` under the step's output contract (verify applies this
    before the step's checks)."""
    contract = args.get("output", "text")
    if contract == "text":
        if isinstance(output, str) and output.strip():
            return []
        return ["output: the answer is not a non-empty text"]
    try:
        model = _contract_of(contract)
    except ValueError:
        return []  # a contract the plan validation refused never runs
    try:
        model.model_validate(output)
    except ValidationError as exc:
        return [f"output schema: {problem}" for problem in _problems(exc)]
    return []


def _problems(exc: ValidationError) -> list[str]:
    return [
        f"{'.'.join(str(x) for x in e['loc']) or '(the answer)'}: {e['msg']}"
        for e in exc.errors(include_url=False)
    ]


def answer_again(args: dict[str, Any], failure: StepFailure) -> dict[str, Any] | None:
    """The replan rule: an output the verifier failed goes back to the model for another
    round (its prompt then holds the answer and the findings); other failures are not a
    model step's to fix."""
    if failure.failure_class is not FailureClass.VALIDATION:
        return None
    return {**args, "round": int(args.get("round", 1)) + 1}


def best_json(raw: str) -> Any:
    """An answer that did not fit its contract, as the step's output: the JSON it holds
    (the whole answer, else its first object), else the text itself."""
    text = raw.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            return decoder.raw_decode(text, start)[0]
        except ValueError:
            start = text.find("{", start + 1)
    return text


def run_model_step(ctx: ToolContext, **fields: Any) -> Any:
    """The tool's implementation: build the prompt, ask once, return the answer."""
    from onward.llm.stepmodel import step_prompt

    if ctx.model is None:
        raise DeterministicToolError(
            "a model step needs a model, and the run has none",
            hint="configure one (OPENAI_API_KEY / ONWARD_MODEL, or Onward(model=...))",
        )
    args = ModelStepArgs.model_validate(fields)
    contract = _contract_of(args.output)
    messages = step_prompt(args.instruction, args.inputs, ctx)
    answer = ctx.model.ask(messages, contract, purpose=PURPOSE)
    if answer.refusal is not None:
        raise DeterministicToolError(
            f"the model refused: {answer.refusal}", hint="rephrase the step's instruction"
        )
    if args.output == "text":
        return answer.parsed.text if answer.parsed is not None else answer.raw.strip()
    if answer.parsed is not None:
        return answer.parsed.model_dump(mode="json", exclude_unset=True)
    return best_json(answer.raw)  # verify says what is wrong with it


SPEC = default_registry.register(
    ToolSpec(
        name="model_step",
        fn=run_model_step,
        args_model=ModelStepArgs,
        description="One model call: an instruction, inputs by reference, an output contract",
        side_effect=SideEffect.IDEMPOTENT,
        timeout=timedelta(minutes=10),
        wants_context=True,
        fix_args=answer_again,
        output_findings=output_findings,
    )
)
"""The built-in's spec (registered on import of onward.tools)."""
