"""The parts of onward's checkpoint format that are onward's own (checkpointing/serde.py
writes it), apart from the serializer so that a reader without LangGraph
(onward.observe.latest) uses the same bytes."""

from __future__ import annotations

import threading
import zlib
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

from onward.checkpointing import zdict
from onward.errors import StoreCorruptError

COMPRESSED = "msgpack-z2"
"""The type of a msgpack blob deflated with :data:`ZDICT_2` (no ``+`` in it: LangGraph's
EncryptedSerializer splits the cipher's name off at the first one). Stores written
before it hold ``msgpack-z1`` blobs (:data:`ZDICT`) or plain ``msgpack`` ones, which load
as before."""
COMPRESSED_1 = "msgpack-z1"

COMPRESS_MIN_BYTES = 256
"""Smaller blobs (most writes) are kept as they are: zlib's header would eat the gain."""
FAST_DEFLATE_BYTES = 64 * 1024
"""Blobs this large (a long run's snapshot) deflate at level 1, smaller ones at 3: a large
snapshot is deflated every step it is written, and the few bytes a higher level saves on
it cost a step more time than they save (docs/benchmarks.md, "Storage")."""

ZDICT = "".join(
    (
        "channel_valueschannel_versionsversions_seenupdated_channels__start____input__",
        "__pregel_taskslanggraph.typesSendbranch:to:planbranch:to:executebranch:to:verify",
        "branch:to:gatebranch:to:finalizebranch:to:approvebranch:to:retrybranch:to:replan",
        "schema_versionworkdirgoalonward.model.stateGoalobjectiveacceptanceconstraints",
        "inputsjudgemodel_validate_jsonbudgetBudgetmax_stepssteps_usedmax_replans",
        "max_run_timemax_tokensmax_costtool_modulesmax_concurrencywavewaitingplan_approval",
        "policyonward.policies.runRunPolicyapprove_toolsbuiltinsfrozensetauto_approve",
        "approve_allapprove_planconfine_pathsescalate_failuresallow_toolsdeadlineremind_after",
        "datetimetimedeltaexpire_afteron_expiryExpiryActionrejecttool_deadlinesstarted_at",
        "fromisoformatresume_atusageUsagecallsinput_tokensoutput_tokenscostbudget_warnings",
        "statusRunStatusrunningfailureStepFailurefailure_classmessageerror_typehint",
        "ExecuteTaskApproveTaskNoteTasksteptoolargsvaluedepends_onoutputchecksdescription",
        "retryrecordStepStatuspendingproducedfaileddoneskippedattemptseffect_keyfindings",
        "ended_atnotenot_beforereplansstreakattempt_floorhistoryapproval_requiredapproval",
        "judge_goalmessagesplanstepsartifactsdecisionsapprovalsStepRecordnameuri",
        "artifact://sha256/sha256sizesummarybodyexecuteverifygateapprovefinalize",
        "0000000000000000000000000000000",
    )
).encode()
"""zlib's preset dictionary: the names every checkpoint repeats (channels, models, their
fields, LangGraph's padded versions), so even a small blob compresses (a checkpoint to
about a quarter). Part of the stored format: changing it needs a new :data:`COMPRESSED`
type (tests/store/test_serde.py pins its hash)."""

ZDICT_2 = zdict.build(ZDICT)
"""``msgpack-z2``'s preset dictionary: :data:`ZDICT`, then the skeleton of a checkpoint and
of the task writes as msgpack bytes (:mod:`onward.checkpointing.zdict`): a 1,000-step
run's checkpoints deflate to 260 bytes, not 630. Pinned by tests/store/test_serde.py too."""

ZDICTS = {COMPRESSED: ZDICT_2, COMPRESSED_1: ZDICT}
"""The preset dictionary of each compressed blob type."""

# Primed once, since loading the dictionary is a large part of deflating a small blob: each
# blob deflates in a copy of a primed stream (zlib's objects lock themselves, so threads
# may share). A step's blobs are small, so the window is 8 KB (the whole dictionary still
# fits) and memLevel 5: the state a copy duplicates is a tenth of the default's, for the
# same bytes. Inflating needs no change: a zlib stream names its window, and any window up
# to 32 KB inflates with the default one. Level 3 is where fewer instructions stop paying
# for more bytes (the measurements: commits ea2a797 and a9e7d00).
_DEFLATE_3 = zlib.compressobj(3, zlib.DEFLATED, 13, 5, zdict=ZDICT_2)
_DEFLATE_1 = zlib.compressobj(1, zdict=ZDICT_2)
_INFLATE = {z: zlib.decompressobj(zdict=z) for z in (ZDICT_2, ZDICT)}


def deflate(blob: bytes, fast: bool = False) -> bytes:
    """``blob`` deflated as a :data:`COMPRESSED` blob; at level 1 if ``fast`` (a chunk of a
    large body) or large."""
    fast = fast or len(blob) >= FAST_DEFLATE_BYTES
    squeeze = (_DEFLATE_1 if fast else _DEFLATE_3).copy()
    return squeeze.compress(blob) + squeeze.flush()


def inflate(blob: bytes, type_: str, limit: int = 0) -> bytes:
    """A compressed blob of ``type_`` (a key of :data:`ZDICTS`) back to its msgpack bytes;
    with a ``limit``, at most that many bytes (a damaged blob cannot inflate without end)."""
    try:
        stream = _INFLATE[ZDICTS[type_]].copy()
        if limit:
            return stream.decompress(blob, limit)
        return stream.decompress(blob) + stream.flush()
    except zlib.error as exc:
        raise StoreCorruptError(
            f"a checkpoint cannot be read: its compressed bytes are damaged ({exc}). Nothing "
            "was changed; restore the store from a backup"
        ) from exc


EXT_LAZY = 64
"""msgpack extension code of onward's lazy collections (LangGraph's own codes are 0-7)."""


def stored_name(data: bytes) -> tuple[str, str] | None:
    """The (module, name) a LangGraph extension's payload starts with, read without
    decoding the rest (its fields may name types only known once it is known whose they
    are); None when it does not start with two strings."""
    try:
        at = _ARRAY_HEADER.get(data[0] & 0xF0 if data[0] < 0xA0 else data[0])
        if at is None:
            return None
        module, at = _string(data, at)
        name, _ = _string(data, at)
    except (IndexError, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    return module, name


_ARRAY_HEADER = {0x90: 1, 0xDC: 3, 0xDD: 5}
"""msgpack array headers (fixarray, array 16, array 32) → how many bytes they take."""


def _string(data: bytes, at: int) -> tuple[str, int]:
    """The msgpack string at ``at`` and where it ends (``ValueError``: not a string)."""
    first = data[at]
    if 0xA0 <= first <= 0xBF:
        size, at = first & 0x1F, at + 1
    elif first == 0xD9:
        size, at = data[at + 1], at + 2
    elif first == 0xDA:
        size, at = int.from_bytes(data[at + 1 : at + 3]), at + 3
    else:
        raise ValueError("not a string")
    return data[at : at + size].decode(), at + size


CHUNK_BYTES = 64 * 1024
"""A body this large is stored in chunks of about this size, cut between items (deflate's
window is 32 KB, so chunks this size compress about as well as one stream)."""


class ChunkedBody:
    """A collection's body stored as deflated chunks, each cut between two items and
    inflated the first time an item in it is read. Sliced by offsets into the whole body,
    as the plain ``bytes`` body of a smaller collection is.

    Stored form (a msgpack list, where a small body is ``bytes``): ``[starts, chunks]``,
    ``starts`` the offset where each chunk begins (``array("Q")`` bytes, first 0, then one
    more: the body's length), ``chunks`` the deflated chunks (checkpointing/format.py's
    stream, so a damaged chunk is a :class:`~onward.errors.StoreCorruptError`)."""

    __slots__ = ("_chunks", "_plain", "_whole", "starts")

    def __init__(self, starts: bytes, chunks: list[bytes]) -> None:
        self.starts = array("Q")
        self.starts.frombytes(starts)
        if len(self.starts) != len(chunks) + 1 or self.starts[0] != 0:
            raise ValueError("a chunked body whose chunks and offsets differ in number")
        if any(a > b for a, b in zip(self.starts, self.starts[1:], strict=False)):
            raise ValueError("a chunked body whose offsets go backwards")
        self._chunks: list[bytes] = list(chunks)
        self._plain: dict[int, bytes] = {}
        self._whole: bytes | None = None

    @classmethod
    def of(cls, body: bytes, ends: Sequence[int]) -> bytes | ChunkedBody:
        """``body`` as stored: itself if small, else in chunks cut at items' ``ends``."""
        if len(body) < 2 * CHUNK_BYTES:
            return body
        starts, chunks, start = array("Q", [0]), [], 0
        for end in ends:
            if end - start >= CHUNK_BYTES or end == len(body):
                chunks.append(deflate(body[start:end], fast=True))
                starts.append(end)
                start = end
        return cls(starts.tobytes(), chunks)

    def stored(self) -> list[Any]:
        return [self.starts.tobytes(), self._chunks]

    def __len__(self) -> int:
        return self.starts[-1]

    def chunk(self, k: int) -> bytes:
        """Chunk ``k`` inflated (kept: an item read once is often read again)."""
        if self._whole is not None:
            return self._whole[self.starts[k] : self.starts[k + 1]]
        plain = self._plain.get(k)
        if plain is None:
            size = self.starts[k + 1] - self.starts[k]
            plain = inflate(self._chunks[k], COMPRESSED, size + 1)
            if len(plain) != size:
                raise StoreCorruptError(
                    "a checkpoint cannot be read: a chunk of a collection has the wrong "
                    "length. Nothing was changed; restore the store from a backup"
                )
            self._plain[k] = plain
        return plain

    def __getitem__(self, where: slice) -> bytes:
        if self._whole is not None:
            return self._whole[where]
        start, stop = where.start or 0, len(self) if where.stop is None else where.stop
        if start >= stop:
            return b""
        k = bisect_right(self.starts, start) - 1
        base = self.starts[k]
        if stop <= self.starts[k + 1]:  # an item: always inside one chunk
            return self.chunk(k)[start - base : stop - base]
        return self.whole()[start:stop]

    def whole(self) -> bytes:
        """The whole body (kept: a search reads it more than once; it then serves every
        read, and the chunks inflated one by one are let go, so one copy is held)."""
        if self._whole is None:
            self._whole = b"".join(self.chunk(k) for k in range(len(self._chunks)))
            self._plain.clear()
        return self._whole

    def find(self, needle: bytes, start: int = 0) -> int:
        return self.whole().find(needle, start)

    def inflated(self) -> int:
        """How many chunks have been inflated so far."""
        return len(self._chunks) if self._whole is not None else len(self._plain)


def storing_items(body: bytes, ends: array[int]) -> tuple[bytes | list[Any], bytes]:
    """A collection's ``(body, offsets)`` as a checkpoint stores them: as they are, or (a
    large body) the body in chunks and the offsets deflated. Then the checkpoint blob that
    holds them is not deflated again (serde.py): inflating it whole is the cost the chunks
    avoid, for a fraction of its bytes."""
    chunked = ChunkedBody.of(body, ends[1:])
    if isinstance(chunked, bytes):
        return body, ends.tobytes()
    CHUNKED.bodies += 1
    return chunked.stored(), deflate(ends.tobytes(), fast=True)


def stored_items(body: Any, offsets: bytes) -> tuple[bytes | ChunkedBody, bytes]:
    """A collection's ``(body, offsets)`` as read from a checkpoint (see
    :func:`storing_items`)."""
    if isinstance(body, bytes):
        return body, offsets
    if isinstance(body, list) and len(body) == 2:
        chunked = ChunkedBody(*body)
        CHUNKED.readable += len(chunked)
        return chunked, inflate(offsets, COMPRESSED)
    raise ValueError("a collection body that is neither bytes nor chunks")


class _Chunked(threading.local):
    bodies = 0
    """Large bodies stored in chunks in the blob this thread is encoding: such a blob (a
    long run's snapshot) is not deflated again (serde.py)."""
    readable = 0
    """Bytes the chunked bodies of the blob this thread is decoding inflate to, read or
    not: what keeping the decoded blob may come to cost (serde.py's cache)."""


CHUNKED = _Chunked()
