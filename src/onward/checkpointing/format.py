"""The parts of onward's checkpoint format that are onward's own (checkpointing/serde.py
writes it), apart from the serializer so that a reader without LangGraph
(onward.observe.latest) uses the same bytes."""

from __future__ import annotations

import zlib

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
"""Blobs this large (a long run's snapshot) deflate at level 1, smaller ones at 6: on a
600 KB snapshot level 6 takes 4 ms, not 1.3, for 4 % fewer bytes; on a step's 2 KB
checkpoint it saves a tenth of the bytes for ~10 us."""

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
type (tests/test_serde.py pins its hash)."""

ZDICT_2 = zdict.build(ZDICT)
"""``msgpack-z2``'s preset dictionary: :data:`ZDICT`, then the skeleton of a checkpoint and
of the task writes as msgpack bytes (:mod:`onward.checkpointing.zdict`): a 1,000-step
run's checkpoints deflate to 260 bytes, not 630. Pinned by tests/test_serde.py too."""

ZDICTS = {COMPRESSED: ZDICT_2, COMPRESSED_1: ZDICT}
"""The preset dictionary of each compressed blob type."""

# Primed once: loading a 7 KB dictionary into a new stream cost ~10 µs of a blob's ~19;
# a copy of a primed stream costs ~2 (zlib's objects lock themselves, so threads may share).
_DEFLATE_6 = zlib.compressobj(6, zdict=ZDICT_2)
_DEFLATE_1 = zlib.compressobj(1, zdict=ZDICT_2)
_INFLATE = {z: zlib.decompressobj(zdict=z) for z in (ZDICT_2, ZDICT)}


def deflate(blob: bytes) -> bytes:
    """``blob`` deflated as a :data:`COMPRESSED` blob."""
    squeeze = (_DEFLATE_6 if len(blob) < FAST_DEFLATE_BYTES else _DEFLATE_1).copy()
    return squeeze.compress(blob) + squeeze.flush()


def inflate(blob: bytes, type_: str) -> bytes:
    """A compressed blob of ``type_`` (a key of :data:`ZDICTS`) back to its msgpack bytes."""
    try:
        stream = _INFLATE[ZDICTS[type_]].copy()
        return stream.decompress(blob) + stream.flush()
    except zlib.error as exc:
        raise StoreCorruptError(
            f"a checkpoint cannot be read: its compressed bytes are damaged ({exc}). Nothing "
            "was changed; restore the store from a backup"
        ) from exc


EXT_LAZY = 64
"""msgpack extension code of onward's lazy collections (LangGraph's own codes are 0-7)."""
