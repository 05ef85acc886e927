"""Checkpoint serializer: large blobs (snapshots of long runs) are decoded once per process,
never served stale, and never shared with a caller that could change them."""

from __future__ import annotations

import os
from typing import Any

import ormsgpack
import pytest
from langgraph.checkpoint.serde.jsonplus import EXT_DELTA_SNAPSHOT, JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from onward.checkpointing import serde as serde_module
from onward.checkpointing.serde import (
    CACHE_MIN_BYTES,
    EXT_LAZY,
    checkpoint_serde,
    checkpoint_types,
)
from onward.errors import StoreCorruptError
from onward.model.state import ArtifactRef, StepRecord, StepStatus
from onward.store.encryption import Cipher


def snapshot(n: int, *, summary: str = "ok") -> dict[str, Any]:
    """A checkpoint-shaped value holding a snapshot of ``n`` step records."""
    records = {
        f"s{i}": StepRecord(
            id=f"s{i}",
            status=StepStatus.DONE,
            attempts=1,
            output=ArtifactRef(
                name=f"step:s{i}", uri="x", sha256="0" * 64, size=1, summary=summary
            ),
        )
        for i in range(n)
    }
    return {"channel_values": {"steps": _DeltaSnapshot(records)}, "versions_seen": {}}


def records(value: dict[str, Any]) -> dict[str, StepRecord]:
    result: dict[str, StepRecord] = value["channel_values"]["steps"].value
    return result


@pytest.fixture
def big() -> tuple[Any, tuple[str, bytes]]:
    serde = checkpoint_serde(None)
    dumped = serde.dumps_typed(snapshot(2000))
    assert len(dumped[1]) >= CACHE_MIN_BYTES, "the fixture must be large enough to be cached"
    return serde, dumped


def test_a_large_blob_read_twice_is_decoded_once(big: tuple[Any, tuple[str, bytes]]) -> None:
    serde, dumped = big
    first, second = serde.loads_typed(dumped), serde.loads_typed((dumped[0], bytes(dumped[1])))
    assert records(first) == records(second)
    # The same record objects: the second read did not rebuild them.
    assert records(first)["s7"] is records(second)["s7"]


def test_decoded_values_equal_langgraphs_own(big: tuple[Any, tuple[str, bytes]]) -> None:
    serde, dumped = big
    plain = JsonPlusSerializer(allowed_msgpack_modules=None).with_msgpack_allowlist(
        checkpoint_types()
    )
    for _ in range(2):
        assert records(serde.loads_typed(dumped)) == records(plain.loads_typed(dumped))


def test_changing_a_loaded_value_does_not_change_the_next_load(
    big: tuple[Any, tuple[str, bytes]],
) -> None:
    serde, dumped = big
    first = serde.loads_typed(dumped)
    records(first).clear()
    first["channel_values"]["steps"] = "gone"
    again = serde.loads_typed(dumped)
    assert len(records(again)) == 2000


def test_other_bytes_are_decoded_anew(big: tuple[Any, tuple[str, bytes]]) -> None:
    serde, dumped = big
    serde.loads_typed(dumped)
    changed = serde.dumps_typed(snapshot(2000, summary="changed"))
    assert records(serde.loads_typed(changed))["s1"].output.summary == "changed"
    assert records(serde.loads_typed(dumped))["s1"].output.summary == "ok"


def test_a_clone_with_a_wider_allowlist_does_not_read_the_narrower_decode(
    big: tuple[Any, tuple[str, bytes]],
) -> None:
    _, dumped = big
    narrow = serde_module.OnwardSerializer(allowed_msgpack_modules=None)  # no onward types
    blocked = narrow.loads_typed(dumped)  # strict msgpack: records come back as plain dicts
    assert isinstance(records(blocked)["s1"], dict)
    wide = narrow.with_msgpack_allowlist(checkpoint_types())
    assert isinstance(records(wide.loads_typed(dumped))["s1"], StepRecord)


def test_the_cache_keeps_at_most_its_size(
    big: tuple[Any, tuple[str, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    serde, dumped = big
    monkeypatch.setattr(serde_module, "CACHE_MAX_BYTES", len(dumped[1]) + 1)
    first = records(serde.loads_typed(dumped))
    other = serde.dumps_typed(snapshot(2000, summary="ko"))
    serde.loads_typed(other)  # pushes the first blob out
    assert records(serde.loads_typed(dumped))["s1"] is not first["s1"]


def test_encrypted_large_blobs_round_trip_and_are_cached() -> None:
    serde = checkpoint_serde(Cipher(os.urandom(32)))
    dumped = serde.dumps_typed(snapshot(2000))
    first, second = serde.loads_typed(dumped), serde.loads_typed(dumped)
    assert records(first)["s3"].status is StepStatus.DONE
    assert records(first)["s3"] is records(second)["s3"]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (["future", []], "unknown kind 'future'"),
        (["steps", [["a"], b"xx", b"\x00" * 8, "d", 1, []]], "ids and items differ in number"),
        (["steps", 5], "cannot unpack"),
    ],
)
def test_an_unreadable_lazy_collection_is_a_clear_store_error(payload: Any, reason: str) -> None:
    snapshot = ormsgpack.Ext(
        EXT_DELTA_SNAPSHOT, ormsgpack.packb(ormsgpack.Ext(EXT_LAZY, ormsgpack.packb(payload)))
    )
    blob = ormsgpack.packb({"channel_values": {"steps": snapshot}})

    with pytest.raises(StoreCorruptError, match=reason) as caught:
        checkpoint_serde(None).loads_typed(("msgpack", blob))
    assert "restore the store from a backup or upgrade onward" in str(caught.value)
