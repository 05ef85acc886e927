"""The parts of onward's checkpoint format that are onward's own (checkpointing/serde.py
writes it), apart from the serializer so that a reader without LangGraph
(onward.observe.latest) uses the same bytes."""

from __future__ import annotations

COMPRESSED = "msgpack-z1"
"""The type of a msgpack blob deflated with :data:`ZDICT` (no ``+`` in it: LangGraph's
EncryptedSerializer splits the cipher's name off at the first one). Stores written
before it hold plain ``msgpack`` blobs, which load as before."""

COMPRESS_MIN_BYTES = 256
"""Smaller blobs (most writes) are kept as they are: zlib's header would eat the gain."""

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


EXT_LAZY = 64
"""msgpack extension code of onward's lazy collections (LangGraph's own codes are 0-7)."""
