"""Effects at most once under SIGKILL: a plan mixing copy_file, write_file, notify and
http_post is killed at many moments, resumed in a new process, and its effects counted.

The plan (written per case) copies inbox/a..c to archive/, writes archive/manifest.txt
from an upstream artifact, appends two notify lines to outbox.jsonl and POSTs twice to a
loopback :class:`tests.support.httpfake.FakeService` started by the test: ``post-archived`` has a
``status_url`` (an unknown outcome is settled by reconcile), ``post-audit`` has none (an
unknown outcome stops the run in ``waiting_for_human``). Steps run two at a time.

The service lives in the test process, so it outlives the killed ``onward`` process and
its counters (POSTs per ``Idempotency-Key``, stored *before* its delayed answer) are the
ground truth. Each case kills a real ``onward run`` with SIGKILL at one moment:

* when the execution journal (``ONWARD_EXECUTION_LOG``: a line when a tool call starts and
  one when it ends) reaches line N, at once or a little later (between a tool's end, its
  checkpoint and the next superstep);
* with ``ONWARD_FAULT_TOOL_DELAY`` so the kill lands inside a tool, after the ledger
  claimed its key but before its effect (at journal line N, or as each http_post starts);
* while an http_post is in flight: the service has stored the POST but not yet answered;
* through the fault-injection hook ``ONWARD_FAULT_KILL``: ``after_effect:STEP`` (the effect
  happened, the ledger never heard) and ``after_record:STEP`` (the ledger recorded it, the
  checkpoint did not).

Then ``onward resume --takeover`` runs until the run is done. When it stops waiting for a
human, the test asks the service whether the key arrived and settles the step with
``onward resolve --as done`` (with the result the tool would have returned) or
``--as retry``, then resumes again. Every case must end with: the same files, outbox
messages and POST payloads as an uninterrupted run; one outbox line per notify key; each
http_post key POSTed exactly once; one completed ledger row per step; and no step whose
execution was committed before the kill run again.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from onward import Onward
from tests.support import zygote
from tests.support.common import cli_env, read_jsonl
from tests.support.httpfake import FakeService, accepted

pytestmark = pytest.mark.crash

SHORT_LEASE = {"ONWARD_LEASE_TTL": "0.5", "ONWARD_HEARTBEAT": "0.1"}
"""The killed driver's lease outlives it by at most half a second."""
NO_PROXY = {"no_proxy": "127.0.0.1,localhost", "NO_PROXY": "127.0.0.1,localhost"}
"""A proxy from the environment must not intercept the loopback service."""
SERVICE_DELAY = 0.15
"""Seconds the service holds each POST after storing it: kills can land mid-request."""
IN_FLIGHT_DELAY = 0.5
"""The service's delay for cases aimed at a POST in flight (leaves room for the kill)."""

UNRECONCILABLE = "post-audit"
"""http_post without status_url: an unknown outcome waits for a human."""
RECONCILABLE = "post-archived"
"""http_post with status_url: an unknown outcome is settled by reconcile."""
FILE_STEPS = ("copy-a", "copy-b", "copy-c", "manifest")
NOTIFY_STEPS = ("notify-archived", "notify-done")
POST_STEPS = (UNRECONCILABLE, RECONCILABLE)
STEPS = (*FILE_STEPS, *NOTIFY_STEPS, *POST_STEPS)
"""Every step has an effect (none is pure)."""
JOURNAL_LINES = 2 * len(STEPS)
"""Lines of an uninterrupted run's execution journal: one start and one end per step."""
EVENTS = {UNRECONCILABLE: "audit", RECONCILABLE: "archived"}
"""The ``event`` field of each http_post step's payload: how the service tells them apart."""
EFFECT_OUTPUTS = {
    "notify-archived": "archived_notice",
    "notify-done": "done_notice",
    UNRECONCILABLE: "audit_posted",
    RECONCILABLE: "archived_posted",
}
"""Artifact names of the steps whose outputs carry their effect key."""
INBOX = {name: f"{name} line\n".encode() * size for name, size in (("a", 3), ("b", 7), ("c", 11))}


def _plan(service: FakeService) -> dict[str, Any]:
    status_200 = [{"check": "equals", "field": "status", "value": 200}]
    copies = [
        {
            "id": f"copy-{x}",
            "tool": "copy_file",
            "args": {"src": f"inbox/{x}.txt", "dst": f"archive/{x}.txt"},
            "output": f"copied_{x}",
            "checks": [{"check": "file_exists", "path": f"archive/{x}.txt"}],
        }
        for x in INBOX
    ]
    return {
        "goal": "Archive the inbox, announce it and tell two services",
        "max_concurrency": 2,
        "acceptance": [{"check": "file_count", "path": "archive", "equals": 4}],
        "steps": [
            *copies,
            {
                "id": UNRECONCILABLE,
                "tool": "http_post",
                "args": {
                    "url": service.url,
                    "payload": {"event": "audit", "file": "${copied_a.dst}"},
                },
                "depends_on": ["copy-a"],
                "output": "audit_posted",
                "checks": status_200,
            },
            {
                "id": "manifest",
                "tool": "write_file",
                "args": {"path": "archive/manifest.txt", "content": "${copied_c.sha256}"},
                "depends_on": ["copy-a", "copy-b", "copy-c"],
                "output": "manifest",
                "checks": [{"check": "file_exists", "path": "archive/manifest.txt"}],
            },
            {
                "id": "notify-archived",
                "tool": "notify",
                "args": {"outbox": "outbox.jsonl", "message": "archived 3 files", "channel": "ops"},
                "depends_on": ["manifest"],
                "output": "archived_notice",
            },
            {
                "id": RECONCILABLE,
                "tool": "http_post",
                "args": {
                    "url": service.url,
                    "status_url": service.status_url,
                    "payload": {"event": "archived", "files": 3},
                },
                "depends_on": ["manifest"],
                "output": "archived_posted",
                "checks": status_200,
            },
            {
                "id": "notify-done",
                "tool": "notify",
                "args": {"outbox": "outbox.jsonl", "message": "all done"},
                "depends_on": ["notify-archived", RECONCILABLE, UNRECONCILABLE],
                "output": "done_notice",
            },
        ],
    }


@dataclass(frozen=True)
class Case:
    """One run's work directory, store and journal."""

    root: Path
    store: str | None = None
    """The store URL (the db_url fixture: SQLite or Postgres); None: a SQLite file here."""
    allow: str = ""
    """ONWARD_HTTP_ALLOW for the runs: the loopback service's host:port."""

    @property
    def wd(self) -> Path:
        return self.root / "work"

    @property
    def db(self) -> str:
        return self.store or f"sqlite:///{self.root / 'store' / 'onward.db'}"

    @property
    def journal(self) -> Path:
        return self.root / "journal.jsonl"

    @classmethod
    def create(cls, root: Path, service: FakeService, store: str | None = None) -> Case:
        case = cls(root, store, allow=f"127.0.0.1:{service.port}")
        (case.wd / "inbox").mkdir(parents=True)
        for name, data in INBOX.items():
            (case.wd / "inbox" / f"{name}.txt").write_bytes(data)
        plan = yaml.safe_dump(_plan(service), sort_keys=False)
        (case.wd / "plan.yaml").write_text(plan, encoding="utf-8")
        return case

    def env(self, **extra: str) -> dict[str, str]:
        return cli_env(
            ONWARD_EXECUTION_LOG=str(self.journal),
            ONWARD_HTTP_ALLOW=self.allow,
            **SHORT_LEASE,
            **NO_PROXY,
            **extra,
        )

    def run_args(self, thread_id: str) -> list[str]:
        return [
            "run",
            "--plan",
            "plan.yaml",
            "--thread-id",
            thread_id,
            "--db",
            self.db,
            "--json",
            "--auto-approve",
            "http_post",  # approvals are tested in test_approvals
        ]

    def onward(self, *args: str) -> subprocess.CompletedProcess[str]:
        return zygote.run(
            [*args, "--db", self.db, "--json"], cwd=self.wd, env=self.env(), timeout=120
        )

    def journal_lines(self) -> list[dict[str, Any]]:
        return read_jsonl(self.journal)  # the process under test may be writing a line

    def journal_line_count(self) -> int:
        """Complete lines so far, without parsing them (polled every 2 ms while the run goes:
        the poll should not take CPU from the process it waits for)."""
        try:
            return self.journal.read_bytes().count(b"\n")
        except FileNotFoundError:
            return 0

    def starts(self) -> Counter[str]:
        """Tool calls per step so far (ledger replays call nothing and write no line)."""
        return Counter(str(e["step"]) for e in self.journal_lines() if e["phase"] == "start")

    def outbox(self) -> list[dict[str, Any]]:
        path = self.wd / "outbox.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]


@dataclass(frozen=True)
class Outcome:
    """What a finished run left behind, minus what differs between runs by design
    (thread-specific keys, timestamps)."""

    statuses: dict[str, str]
    files: dict[str, bytes]
    file_outputs: dict[str, Any]
    """Artifact values of the copy and write steps."""
    messages: list[tuple[str, str]]
    """(channel, message) per outbox line, in file order."""
    payloads: list[str]
    """Canonical JSON of each POST body the service received, sorted."""


def _outcome(case: Case, service: FakeService, thread_id: str) -> Outcome:
    with Onward(case.db) as ow:
        view = ow.get(thread_id)
        outputs = {
            name: view.artifact_value(ow, name)
            for name in ("copied_a", "copied_b", "copied_c", "manifest")
        }
    archive = case.wd / "archive"
    return Outcome(
        statuses={s.id: s.status.value for s in view.steps},
        files={p.name: p.read_bytes() for p in sorted(archive.iterdir())},
        file_outputs=outputs,
        messages=[(r["channel"], r["message"]) for r in case.outbox()],
        payloads=sorted(json.dumps(p.body, sort_keys=True) for p in service.posts),
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    """The outcome of an uninterrupted run."""
    with FakeService(delay=SERVICE_DELAY) as service:
        case = Case.create(tmp_path_factory.mktemp("reference"), service)
        thread_id = str(uuid.uuid4())
        proc = zygote.run(case.run_args(thread_id), cwd=case.wd, env=case.env(), timeout=120)
        assert proc.returncode == 0, proc.stderr + proc.stdout
        assert len(case.journal_lines()) == JOURNAL_LINES
        outcome = _outcome(case, service, thread_id)
    assert outcome.statuses == dict.fromkeys(STEPS, "done")
    assert outcome.messages == [("ops", "archived 3 files"), ("default", "all done")]
    assert len(outcome.payloads) == len(POST_STEPS)
    return outcome


@pytest.fixture
def service() -> Iterator[FakeService]:
    with FakeService(delay=SERVICE_DELAY) as svc:
        yield svc


# --------------------------------------------------------------------------- kill moments


@dataclass(frozen=True)
class KillPoint:
    line: int = 0
    """Kill when the execution journal has this many lines."""
    delay: float = 0.0
    """Extra seconds after the line (or after the service received the POST)."""
    tool_delay: float = 0.0
    """ONWARD_FAULT_TOOL_DELAY for the killed process: the kill lands inside a tool."""
    in_flight: str = ""
    """An http_post step: kill once the service has stored its POST, before it answers."""
    before_effect: str = ""
    """A step: kill once its call started (effect claimed in the ledger), before the
    effect itself (held back by ``tool_delay``)."""
    fault: str = ""
    """ONWARD_FAULT_KILL for the killed process: it SIGKILLs itself there."""

    def __str__(self) -> str:
        ms = f"+{int(self.delay * 1000)}ms" if self.delay else ""
        if self.fault:
            return self.fault.replace("*", "first-effect")
        if self.in_flight:
            return f"in-flight-{self.in_flight}{ms}"
        if self.before_effect:
            return f"claimed-{self.before_effect}-before-its-effect"
        if self.tool_delay:
            return f"inside-tool-line{self.line:02d}"
        return f"line{self.line:02d}{ms}"


KILL_POINTS = [
    *(KillPoint(line=n) for n in range(1, JOURNAL_LINES + 1)),
    # A few ms after a step's end: in the machinery that follows it (verify, the next
    # schedule, the commit). Longer would outlast the whole tail of a fast run.
    *(KillPoint(line=n, delay=0.003) for n in range(2, JOURNAL_LINES + 1, 2)),
    *(KillPoint(line=n, tool_delay=0.2) for n in range(1, JOURNAL_LINES, 2)),
    *(KillPoint(in_flight=s, delay=d) for s in POST_STEPS for d in (0.0, 0.05, 0.15)),
    *(KillPoint(before_effect=s, tool_delay=0.5) for s in POST_STEPS),
    *(KillPoint(fault=f"after_effect:{s}") for s in STEPS),
    *(KillPoint(fault=f"after_record:{s}") for s in STEPS),
    KillPoint(fault="after_effect:*"),
]


def _posts_for(service: FakeService, step: str) -> int:
    return sum(1 for p in list(service.posts) if (p.body or {}).get("event") == EVENTS[step])


def _start_and_kill(case: Case, service: FakeService, thread_id: str, point: KillPoint) -> None:
    """Start ``onward run`` and have it SIGKILLed at ``point``."""
    extra = {}
    if point.tool_delay:
        extra["ONWARD_FAULT_TOOL_DELAY"] = str(point.tool_delay)
    if point.fault:
        extra["ONWARD_FAULT_KILL"] = point.fault
    if point.in_flight:
        service.delay = IN_FLIGHT_DELAY
    stderr = case.root / "run.stderr"
    with stderr.open("wb") as err:
        proc = zygote.spawn(
            case.run_args(thread_id),
            cwd=case.wd,
            env=case.env(**extra),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            if point.fault:
                proc.wait(timeout=120)
            else:
                deadline = time.monotonic() + 120

                def reached() -> bool:
                    if point.in_flight:
                        return _posts_for(service, point.in_flight) > 0
                    if point.before_effect:
                        return point.before_effect in case.starts()
                    return case.journal_line_count() >= point.line

                while not reached() and proc.poll() is None:
                    assert time.monotonic() < deadline, "the run made no progress"
                    time.sleep(0.002)
                if point.delay:
                    time.sleep(point.delay)
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    service.delay = SERVICE_DELAY
    assert proc.returncode == -signal.SIGKILL, (
        f"the run was not killed at {point} (exit {proc.returncode}); the case would prove "
        f"nothing: {stderr.read_text()}"
    )
    if point.in_flight:
        # Stored by the service, never answered: the tool had not returned.
        assert _posts_for(service, point.in_flight) == 1
        ended = {e["step"] for e in case.journal_lines() if e["phase"] == "end"}
        assert point.in_flight not in ended, "the POST was answered before the kill"


# --------------------------------------------------------------------------- resume


@dataclass(frozen=True)
class Settled:
    step_id: str
    action: str
    key: str


def _resume_to_the_end(
    case: Case, service: FakeService, thread_id: str
) -> tuple[dict[str, Any], list[Settled]]:
    """Resume (taking over the dead driver's lease); settle a step waiting for a human the
    way a careful operator would: ask the service whether the key arrived."""
    settled: list[Settled] = []
    for _ in range(3):
        resumed = case.onward("resume", thread_id, "--takeover")
        if resumed.returncode == 0:
            return json.loads(resumed.stdout), settled
        assert resumed.returncode == 3, resumed.stderr + resumed.stdout
        view = json.loads(resumed.stdout)
        assert view["status"] == "waiting_for_human"
        [waiting] = view["waiting"]
        # Only the http_post without status_url may need a human; reconcile settles the other.
        assert waiting["step_id"] == UNRECONCILABLE, waiting
        assert "outcome unknown" in waiting["reason"]
        key = waiting["key"]
        assert service.counts[key] <= 1, "the effect was guessed at and POSTed again"
        if key in service.received:
            result = case.root / "result.json"
            # What http_post returns for this answer of the service.
            result.write_text(
                json.dumps({"status": 200, "body": {"ok": True, "key": key}, "key": key})
            )
            args = ["--as", "done", "--result-file", str(result), "--reason", "service has it"]
        else:
            args = ["--as", "retry", "--reason", "the service never received it"]
        decided = case.onward("resolve", thread_id, "--step", UNRECONCILABLE, *args)
        assert decided.returncode == 0, decided.stderr + decided.stdout
        settled.append(Settled(UNRECONCILABLE, args[1], key))
    pytest.fail(f"run {thread_id} was not done after 3 resumes")


def _committed_steps(db: str, thread_id: str) -> set[str]:
    """Steps whose execution is in the latest checkpoint (so must never run again)."""
    with Onward(db) as ow:
        return {sid for sid, rec in ow.state(thread_id).steps.items() if rec.attempts > 0}


@pytest.mark.parametrize("point", KILL_POINTS, ids=str)
def test_sigkilled_mixed_effects_happen_once_and_match_an_uninterrupted_run(
    point: KillPoint, tmp_path: Path, service: FakeService, reference: Outcome, db_url: str
) -> None:
    case = Case.create(tmp_path, service, db_url)
    thread_id = str(uuid.uuid4())
    _start_and_kill(case, service, thread_id, point)
    committed = _committed_steps(case.db, thread_id)
    before = case.starts()
    posts_at_kill = Counter(service.counts)

    view, settled = _resume_to_the_end(case, service, thread_id)

    # The run finished, with the same files, messages and payloads as an uninterrupted run.
    assert view["status"] == "done"
    assert _outcome(case, service, thread_id) == reference

    with Onward(case.db) as ow:
        state = ow.state(thread_id)
        keys = {sid: state.record(sid).effect_key for sid in STEPS}
        ledger = {e.step_id: e for e in ow.store.ledger.for_thread(thread_id)}
        final = ow.get(thread_id)
        outputs = {sid: final.artifact_value(ow, name) for sid, name in EFFECT_OUTPUTS.items()}
    assert all(keys.values())
    assert len(set(keys.values())) == len(STEPS)

    # One ledger row per effect, completed, under the key the step carries.
    assert sorted(ledger) == sorted(STEPS)
    assert {sid: (e.key, e.status.value) for sid, e in ledger.items()} == {
        sid: (keys[sid], "completed") for sid in STEPS
    }

    # notify: exactly one outbox line per notify step, no key twice.
    outbox_keys = [r["key"] for r in case.outbox()]
    assert outbox_keys == [keys[sid] for sid in NOTIFY_STEPS]
    for line, sid in enumerate(NOTIFY_STEPS, start=1):
        assert (outputs[sid]["key"], outputs[sid]["line"]) == (keys[sid], line)

    # http_post: every POST reached the service once per key, and nothing else was POSTed.
    assert all(p.status == 200 and p.path == "/effects" for p in service.posts)
    assert dict(service.counts) == {keys[sid]: 1 for sid in POST_STEPS}
    assert service.received == {keys[sid] for sid in POST_STEPS}
    for sid in POST_STEPS:
        assert outputs[sid]["key"] == keys[sid]

    # No step committed before the kill ran again; a step interrupted mid-call ran at most
    # twice (idempotent re-call with the same key, or a POST that never left).
    starts = case.starts()
    rerun = sorted(s for s in committed if starts[s] != before[s])
    assert not rerun, f"steps completed before the kill ran again: {rerun}"
    assert set(starts) <= set(STEPS)
    assert max(starts.values()) <= 2, starts
    for sid in POST_STEPS:
        if posts_at_kill[keys[sid]]:
            # The POST had reached the service: it was never sent again, whatever happened.
            assert starts[sid] == before[sid], f"{sid} was POSTed again after the kill"

    # A human was asked at most once, only about the http_post without status_url, and the
    # decision matches what the service saw.
    assert len(settled) <= 1
    for s in settled:
        assert s.key == keys[UNRECONCILABLE]
        assert s.action == ("done" if posts_at_kill[s.key] else "retry")
    decisions = [(d["step_id"], d["action"]) for d in view["decisions"]]
    assert decisions == [(s.step_id, s.action) for s in settled]

    _check_the_aimed_moment(point, keys, ledger, starts, settled, outputs, posts_at_kill)


def _check_the_aimed_moment(
    point: KillPoint,
    keys: dict[str, str | None],
    ledger: dict[str, Any],
    starts: Counter[str],
    settled: list[Settled],
    outputs: dict[str, Any],
    posts_at_kill: Counter[str],
) -> None:
    """What the protocol promises at the exact moment a case aimed for."""
    if point.in_flight:
        sid = point.in_flight
        assert posts_at_kill[keys[sid]] == 1
        if sid == RECONCILABLE:
            assert settled == []
            # The probe found it (not POSTed again) and gave back the response it got.
            assert outputs[sid] == {"status": 200, "body": accepted(keys[sid]), "key": keys[sid]}
        else:
            assert [s.action for s in settled] == ["done"]
        assert starts[sid] == 1
    if point.before_effect:
        # Claimed, never sent: the service says so, and the POST goes out once, later.
        sid = point.before_effect
        assert posts_at_kill[keys[sid]] == 0
        assert (starts[sid], ledger[sid].calls) == (2, 2)
        if sid == RECONCILABLE:
            assert outputs[sid]["body"] == accepted(keys[sid])  # "not received": sent now
        else:
            assert [s.action for s in settled] == ["retry"]
    if not point.fault or point.fault.endswith("*"):
        return
    phase, sid = point.fault.split(":")
    if phase == "after_record":
        # Recorded in the ledger, lost by the checkpoint: replayed from the ledger.
        assert (starts[sid], ledger[sid].calls) == (1, 1)
    elif sid == UNRECONCILABLE:
        assert [s.action for s in settled] == ["done"]
        assert (starts[sid], ledger[sid].calls) == (1, 1)
    elif sid == RECONCILABLE:
        # Reconciled, not sent again: its result is the one the POST got, as in a run
        # without the crash (a later step can read ${...body}).
        assert outputs[sid] == {"status": 200, "body": accepted(keys[sid]), "key": keys[sid]}
        assert (starts[sid], ledger[sid].calls) == (1, 1)
    else:
        # Idempotent: called again with the same key; the effect itself stays single.
        assert (starts[sid], ledger[sid].calls) == (2, 2)


def test_at_least_fifty_kill_moments_cover_every_kind() -> None:
    assert len(KILL_POINTS) >= 50
    assert len({str(p) for p in KILL_POINTS}) == len(KILL_POINTS)
    assert {p.in_flight for p in KILL_POINTS if p.in_flight} == set(POST_STEPS)
    faults = {p.fault for p in KILL_POINTS if p.fault}
    assert {f"after_effect:{s}" for s in STEPS} <= faults
    assert any(f.startswith("after_record:") for f in faults)
