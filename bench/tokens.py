"""Token benchmark: does a model's context stay small however long the run gets?

What is compared
    * **onward**: a declared plan of N ``noop`` steps in a chain, run with the goal's
      ``judge`` on, so a model reviews every step's output: N model calls. The model
      is onward's ``ScriptedChatModel`` (offline; it always approves and counts the
      tokens of every prompt it receives with onward's estimator). Each call's prompt
      is built by onward's context builder: the pinned goal header, a bounded plan
      status and only the current step's output, fenced.
    * **full-history agent (baseline)**: the same N reviews by an agent that keeps
      the whole conversation: each call sends the system prompt, the goal, and every
      earlier review request and answer, then the new step's output. This is what a
      chat loop does when nothing trims its history.

Both count prompt tokens with the same offline estimator (~4 bytes a token).

Printed: prompt tokens of the call at step ``--late`` ÷ those at step ``--early``
(target ≤ 1.2), and onward's total prompt tokens ÷ the baseline's (target ≤ 1/5).

Run from the repo root: ``python bench/tokens.py [--steps 200 --early 10 --late 200]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import any_size, chain_plan, write_json
from onward import Onward
from onward.llm.context import SYSTEM, message_tokens
from onward.llm.fake import ScriptedChatModel

GOAL = "Count from 0 to N, one step per number, and check every step's result"
VERDICT = {"ok": True, "findings": []}


def run_onward(steps: int) -> list[int]:
    model = ScriptedChatModel(default=VERDICT)
    with tempfile.TemporaryDirectory() as tmp, Onward(f"sqlite:///{tmp}/o.db", model=model) as ow:
        view = ow.run(GOAL, plan=chain_plan(steps), workdir=tmp, judge=True, **any_size())
        assert view.status == "done", view.status
    return [message_tokens(call) for call in model.calls]


def run_full_history(steps: int) -> list[int]:
    model = ScriptedChatModel(default=VERDICT)
    history: list[BaseMessage] = [SystemMessage(SYSTEM), HumanMessage(f"GOAL: {GOAL}")]
    for i in range(steps):
        output = json.dumps({"value": i})
        history.append(
            HumanMessage(f"Review the output of step s{i} (noop): {output}. Answer with JSON.")
        )
        answer = model.invoke(history)
        history.append(AIMessage(answer.text))
    return [message_tokens(call) for call in model.calls]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--early", type=int, default=10)
    parser.add_argument("--late", type=int, default=200)
    parser.add_argument("--json", type=Path, help="also write the ratios here (run_all.py)")
    args = parser.parse_args()
    onward = run_onward(args.steps)
    baseline = run_full_history(args.steps)
    early, late = onward[args.early - 1], onward[args.late - 1]
    growth = late / early
    share = sum(onward) / sum(baseline)
    print(f"{'':28} {'step ' + str(args.early):>10} {'step ' + str(args.late):>10} {'total':>12}")
    print(f"{'onward (judge per step)':28} {early:>10} {late:>10} {sum(onward):>12}")
    print(
        f"{'full-history agent':28} {baseline[args.early - 1]:>10} "
        f"{baseline[args.late - 1]:>10} {sum(baseline):>12}"
    )
    print()
    print(
        f"onward prompt tokens, step {args.late} ÷ step {args.early}: {growth:.2f} "
        f"(target ≤ 1.2: {'PASS' if growth <= 1.2 else 'FAIL'})"
    )
    print(
        f"onward total ÷ full-history total: {share:.3f} = 1/{1 / share:.1f} "
        f"(target ≤ 1/5: {'PASS' if share <= 0.2 else 'FAIL'})"
    )
    write_json(
        args.json,
        [
            {
                "bench": "tokens.py",
                "measure": f"prompt tokens per judge call, step {args.late} ÷ step {args.early}",
                "onward": f"{late} / {early}",
                "baseline": f"full history: {baseline[args.late - 1]} / {baseline[args.early - 1]}",
                "ratio": round(growth, 2),
                "target": "≤ 1.2",
                "met": growth <= 1.2,
            },
            {
                "bench": "tokens.py",
                "measure": f"prompt tokens in all ({args.steps} judged steps)",
                "onward": sum(onward),
                "baseline": f"full-history agent: {sum(baseline)}",
                "ratio": round(share, 3),
                "target": "≤ 0.2 (1/5)",
                "met": share <= 0.2,
            },
        ],
    )


if __name__ == "__main__":
    main()
