"""The light readers' tables are generated from RunState's own metadata and are not stale.

onward.observe.shape is what ``python -m onward.observe.shapegen`` writes; it must equal
what the generator makes of today's ``RunState`` and models, so a field or channel added
there fails here until the shape is regenerated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from langgraph.channels.delta import DeltaChannel
from pydantic import Field

from onward.model.state import RunState, StepRecord, StepStatus
from onward.observe import checkpoint, latest, plain, shape, shapegen


def test_the_shape_module_is_what_the_generator_makes_of_runstate() -> None:
    assert Path(shape.__file__).read_text() == shapegen.render(), (
        "stale: run python -m onward.observe.shapegen"
    )


def test_a_new_delta_or_reducer_channel_changes_the_shape() -> None:
    def append(current: list[str], writes: list[list[str]]) -> list[str]:
        return current + [x for w in writes for x in w]

    class Grown(RunState):
        notes: Annotated[list[str], DeltaChannel(append, list)] = Field(default_factory=list)
        tally: Annotated[int, max] = 0

    deltas, reduced = shapegen.channels(Grown)
    assert deltas["notes"] == "list"
    assert "tally" in reduced
    assert "notes" in shapegen.render(Grown)
    assert shapegen.render(Grown) != shapegen.render()


def test_every_reader_uses_the_generated_tables() -> None:
    deltas, reduced = shapegen.channels(RunState)
    assert checkpoint.DELTA_CHANNELS == frozenset(deltas) == set(latest.DELTA_DEFAULTS)
    assert frozenset(reduced) == checkpoint.REDUCED
    assert plain.DEFAULTS is shape.DEFAULTS
    empty = RunState()
    for name, make in latest.DELTA_DEFAULTS.items():
        assert make() == getattr(empty, name), name


def test_plain_defaults_are_the_models_defaults_by_value() -> None:
    defaults = shape.DEFAULTS["StepRecord"]
    assert defaults["status"] == StepStatus.PENDING.value
    for name, value in defaults.items():
        field = StepRecord.model_fields[name]
        assert getattr(field.default, "value", field.default) == value, name
