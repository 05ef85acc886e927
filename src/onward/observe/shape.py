"""The stored shape of a run, GENERATED from the metadata of ``RunState``: do not edit.

Rewrite it with ``python -m onward.observe.shapegen`` (see that module); a test fails
while it is stale. Read by the LangGraph-free readers (observe.checkpoint, plain, latest).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EXT_CONSTRUCTOR_SINGLE_ARG = 0
EXT_CONSTRUCTOR_POS_ARGS = 1
EXT_CONSTRUCTOR_KW_ARGS = 2
EXT_METHOD_SINGLE_ARG = 3
EXT_PYDANTIC_V2 = 5
EXT_DELTA_SNAPSHOT = 7

DELTA_EMPTY: Mapping[str, str] = {
    "approvals": "dict",
    "artifacts": "ArtifactRefs",
    "decisions": "list",
    "messages": "list",
    "plan": "Plan",
    "steps": "StepRecords",
}
"""The delta channels and the class of the empty value each starts from."""
DELTA_CHANNELS = frozenset(DELTA_EMPTY)
REDUCED = frozenset(
    {
        "budget_warnings",
        "usage",
        "waiting",
        "wave",
    }
)
"""The reducer channels that are not deltas."""
DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "ArtifactRef": {
        "body": None,
        "summary": "",
    },
    "Plan": {
        "source": "declared",
        "version": 1,
    },
    "StepRecord": {
        "attempt_floor": 0,
        "attempts": 0,
        "effect_key": None,
        "ended_at": None,
        "failure": None,
        "not_before": None,
        "note": None,
        "output": None,
        "replans": 0,
        "started_at": None,
        "status": "pending",
        "streak": 0,
        "unjudged": None,
    },
    "Usage": {
        "calls": 0,
        "cost": 0.0,
        "input_tokens": 0,
        "output_tokens": 0,
    },
}
"""The plain defaults of the models observe.plain reads, by class name."""
