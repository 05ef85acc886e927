"""Checkpoint serializer: large blobs (snapshots of long runs) are decoded once per process,
never served stale, and never shared with a caller that could change them."""

from __future__ import annotations

import hashlib
import os
import zlib
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import ormsgpack
import pytest
from langgraph.checkpoint.serde.jsonplus import (
    EXT_DELTA_SNAPSHOT,
    JsonPlusSerializer,
    _msgpack_default,
    _option,
)
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from onward.checkpointing import serde as serde_module
from onward.checkpointing.format import COMPRESSED, COMPRESSED_1, EXT_LAZY, ZDICT, ZDICT_2, inflate
from onward.checkpointing.serde import (
    CACHE_MIN_BYTES,
    _default,
    checkpoint_serde,
    checkpoint_types,
)
from onward.errors import StoreCorruptError
from onward.model.state import ArtifactRef, FailureClass, RunStatus, StepRecord, StepStatus
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
    assert len(raw(dumped)) >= CACHE_MIN_BYTES, "the fixture must be large enough to be cached"
    return serde, dumped


def raw(dumped: tuple[str, bytes]) -> bytes:
    """The msgpack bytes of a dumped value (inflated when it was stored compressed)."""
    return inflate(dumped[1], COMPRESSED) if dumped[0] == COMPRESSED else dumped[1]


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
        expected = records(plain.loads_typed(("msgpack", raw(dumped))))
        assert records(serde.loads_typed(dumped)) == expected


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
    monkeypatch.setattr(serde_module, "CACHE_MAX_BYTES", len(raw(dumped)) + 1)
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


def test_checkpoints_are_stored_compressed_and_read_back() -> None:
    serde = checkpoint_serde(None)
    value = snapshot(50)
    type_, blob = serde.dumps_typed(value)
    plain = ormsgpack.packb(value, default=serde_module._default, option=serde_module._OPTION)
    assert type_ == COMPRESSED
    assert len(blob) * 3 < len(plain)
    assert records(serde.loads_typed((type_, blob))) == records(value)
    # What stores written before compression hold still loads.
    assert records(serde.loads_typed(("msgpack", plain))) == records(value)


def test_blobs_deflated_with_the_first_dictionary_still_load() -> None:
    # Stores written before msgpack-z2 hold msgpack-z1 blobs (the names-only dictionary).
    serde = checkpoint_serde(None)
    value = snapshot(50)
    plain = ormsgpack.packb(value, default=serde_module._default, option=serde_module._OPTION)
    squeeze = zlib.compressobj(1, zdict=ZDICT)
    old = squeeze.compress(plain) + squeeze.flush()
    assert records(serde.loads_typed((COMPRESSED_1, old))) == records(value)
    # The same bytes read with the new dictionary are damaged, not silently misread.
    with pytest.raises(StoreCorruptError, match="compressed bytes are damaged"):
        serde.loads_typed((COMPRESSED, old))


def test_a_checkpoint_deflates_smaller_with_the_skeleton_dictionary() -> None:
    # A checkpoint-shaped value like a run's: the skeleton dictionary (its channel names,
    # versions and model paths as msgpack bytes) must beat the names-only one.
    serde = checkpoint_serde(None)
    value = {
        "v": 4,
        "ts": "2026-12-02T04:26:33.860403+00:00",
        "id": "1f1ee088-e3b6-6d98-8257-5712c4392f5d",
        "channel_values": {"schema_version": 1, "workdir": "/srv/job", "wave": 3},
        "channel_versions": {
            name: f"{7:032}"
            for name in ("__start__", "schema_version", "messages", "workdir", "goal", "plan")
        }
        | {"steps": f"{601:032}", "__pregel_tasks": f"{601:032}"},
        "versions_seen": {"verify": {"branch:to:verify": f"{600:032}"}},
        "updated_channels": ["__pregel_tasks", "steps"],
    }
    type_, blob = serde.dumps_typed(value)
    assert type_ == COMPRESSED
    plain = ormsgpack.packb(value, default=serde_module._default, option=serde_module._OPTION)
    squeeze = zlib.compressobj(6, zdict=ZDICT)
    assert len(blob) < 0.8 * len(squeeze.compress(plain) + squeeze.flush())
    assert serde.loads_typed((type_, blob)) == value


def test_small_values_are_not_compressed() -> None:
    assert checkpoint_serde(None).dumps_typed({"wave": 1})[0] == "msgpack"


def test_compressed_checkpoints_round_trip_encrypted() -> None:
    serde = checkpoint_serde(Cipher(os.urandom(32)))
    type_, blob = serde.dumps_typed(snapshot(50))
    assert type_.startswith(COMPRESSED + "+")
    assert records(serde.loads_typed((type_, blob))) == records(snapshot(50))


def test_a_damaged_compressed_checkpoint_is_a_store_error() -> None:
    type_, blob = checkpoint_serde(None).dumps_typed(snapshot(50))
    with pytest.raises(StoreCorruptError, match="compressed bytes are damaged"):
        checkpoint_serde(None).loads_typed((type_, blob[:10] + b"\x00" * 20 + blob[30:]))


def test_the_preset_dictionary_is_part_of_the_format() -> None:
    # Stores hold blobs deflated with it: a change needs a new COMPRESSED type.
    pinned = "aba1d185c9d8c72ed38c41f00fee32726ccec2037114866ee82dd7756a0cf607"
    assert hashlib.sha256(ZDICT).hexdigest() == pinned
    pinned_2 = "e98404f713113ab83b0a143fedc9034cee1e2359844675b88a5a15b536ea7b5b"
    assert hashlib.sha256(ZDICT_2).hexdigest() == pinned_2


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 12, 1, 20, 30, 1, 5, tzinfo=UTC),
        datetime(2020, 1, 1),
        datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        StepStatus.DONE,
        RunStatus.DONE,
        FailureClass.TRANSIENT,
    ],
    ids=repr,
)
def test_datetimes_and_enums_take_the_fast_path_to_langgraphs_own_bytes(value: Any) -> None:
    ours = ormsgpack.packb({"v": value, "again": value}, default=_default, option=_option)
    theirs = ormsgpack.packb({"v": value, "again": value}, default=_msgpack_default, option=_option)
    assert ours == theirs
    serde = checkpoint_serde(None)
    assert serde.loads_typed(serde.dumps_typed({"v": value}))["v"] == value


def test_kept_datetime_encodings_are_per_object_not_per_value() -> None:
    # Equal instants in two zones (one pydantic's own TzInfo, as a validated field holds)
    # encode differently; each is encoded twice, the second time from what was kept.
    utc = StepRecord.model_validate({"id": "s", "started_at": "2026-01-01T00:00:00Z"})
    assert utc.started_at is not None
    india = utc.started_at.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert india == utc.started_at
    value = {"a": utc.started_at, "b": india, "c": [utc.started_at, india]}
    ours = ormsgpack.packb(value, default=_default, option=_option)
    assert ours == ormsgpack.packb(value, default=_msgpack_default, option=_option)


def test_a_chunked_snapshot_costs_the_cache_what_its_chunks_inflate_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long run's records are stored in deflated chunks (a blob much smaller than what it
    inflates to, a chunk at a time): the cache counts what the chunks inflate to, so its
    size bound holds however many of them a process reads."""
    from onward.checkpointing.format import ChunkedBody
    from onward.model.state import StepRecords

    done = {
        f"s{i}": StepRecord(id=f"s{i}", status=StepStatus.DONE, note="n" * 40) for i in range(8000)
    }
    dumped = checkpoint_serde(None).dumps_typed({"steps": StepRecords().merged([done])})
    monkeypatch.setattr(serde_module, "CACHE_MIN_BYTES", len(dumped[1]))  # cached at all
    serde = checkpoint_serde(None)
    body = serde.loads_typed(dumped)["steps"]._items.body
    assert isinstance(body, ChunkedBody), "the records must be many enough to be chunked"
    assert len(dumped[1]) < len(body)
    assert serde._cache._size == len(dumped[1]) + len(body)
    # Room for the blob but not for what its chunks inflate to: not kept.
    monkeypatch.setattr(serde_module, "CACHE_MAX_BYTES", len(dumped[1]) + len(body) - 1)
    narrow = checkpoint_serde(None)
    narrow.loads_typed(dumped)
    assert narrow._cache._size == 0
