"""Helpers shared by several test modules, moved out of
tests/cli/test_tool_calling_steps.py: REPO, SCRIPT, TOOLS, effects, plan, scripted,
turn_of."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from onward import ScriptedChatModel
from onward.llm.fake import tool_calls
from tests.support.common import read_jsonl
from tests.support.paths import ROOT

REPO = ROOT
TOOLS = ["lookup", "save_note", "publish"]
SCRIPT = [
    tool_calls(("lookup", {"key": "revenue"})),
    tool_calls(("save_note", {"path": "note.txt", "text": "Revenue is up 20 %."})),
    tool_calls(("publish", {"title": "Revenue up 20 %"})),
    "Looked up the revenue, saved the note and published it.",
]


def turn_of(messages: list[BaseMessage]) -> int:
    """Which turn a prompt asks for: one AI message per earlier turn."""
    return sum(isinstance(m, AIMessage) for m in messages)


def scripted(log: Path | None = None) -> ScriptedChatModel:
    """The model answers each turn from SCRIPT by the turn it is asked (so a resumed
    process, whose replayed turns are not asked, answers the next one), logging each ask."""

    def answer(messages: list[BaseMessage]) -> Any:
        turn = turn_of(messages)
        if log is not None:
            with log.open("a") as f:
                f.write(json.dumps({"turn": turn}) + "\n")
        return SCRIPT[turn]

    return ScriptedChatModel(default=answer)


def plan(tools: list[str] = TOOLS, **limits: Any) -> dict[str, Any]:
    return {
        "goal": "publish the revenue note",
        "steps": [
            {
                "id": "agent",
                "tool": "tool_calling",
                "output": "answer",
                "args": {
                    "instruction": "Look up the revenue, save a note about it, publish it.",
                    "tools": tools,
                    **limits,
                },
            }
        ],
    }


def effects(workdir: Path) -> Counter[str]:
    return Counter(e["tool"] for e in read_jsonl(workdir / "effects.jsonl"))
