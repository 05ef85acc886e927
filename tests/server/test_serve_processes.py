"""``onward serve --processes N`` (serve/processes.py): N server processes on one port and
one store, each a real process, SIGKILLed and SIGTERMed here as an operator or the
kernel would. Through the unmodified ``langgraph_sdk``: runs land on both processes and
each finishes once; a process killed mid-run is replaced and its run finished by the
others without an effect done twice; a process that keeps dying stops the server; a bad
start is one clear error with the exit code of one process; SIGTERM drains every process
and exits 0; a process whose parent was killed stops."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psutil
import pytest
from langgraph_sdk import get_sync_client

from onward.serve.processes import MOST_RESTARTS
from onward.store.database import Store
from onward.store.sql import Db
from tests.support.common import cli_env, onward_cmd
from tests.support.hitl_tools import rows
from tests.support.serve import free_port, start_server
from tests.support.serve_api import chain, done_steps, wait_until
from tests.support.serve_durable import FAST_LEASES


def server_processes(parent: int) -> list[int]:
    return [p.pid for p in psutil.Process(parent).children()]


def listening(proc: Any, url: str, n: int) -> list[int]:
    """The server's ``n`` processes, once each listens on its port (the first answers
    before the others have started)."""
    port = int(url.rsplit(":", 1)[1])

    def each_listens() -> bool:
        found = server_processes(proc.pid)
        return len(found) == n and all(
            any(c.laddr.port == port and c.status == "LISTEN" for c in _tcp(pid)) for pid in found
        )

    wait_until(f"{n} server processes", each_listens)
    return server_processes(proc.pid)


def _tcp(pid: int) -> list[Any]:
    try:
        return list(psutil.Process(pid).net_connections("tcp"))
    except psutil.NoSuchProcess:
        return []


@contextmanager
def reaped(proc: Any) -> Iterator[set[int]]:
    """No server process outlives the test, whatever it asserts: the parent and every
    process added to the set (and its children at the end) are SIGKILLed if still there."""
    seen: set[int] = set()
    try:
        yield seen
    finally:
        with suppress(psutil.NoSuchProcess):
            seen.update(server_processes(proc.pid))
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for pid in seen:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextmanager
def serving(db_url: str, workdir: Path, n: int, *args: str, **kw: Any) -> Iterator[Any]:
    """``onward serve --processes n`` once each process listens: (process, URL); it must
    exit 0 when asked to stop at the end."""
    proc, url = start_server(db_url, workdir, "--processes", str(n), *args, real=True, **kw)
    with reaped(proc) as seen:
        seen.update(listening(proc, url, n))
        yield proc, url
        proc.terminate()
        assert proc.wait(30) == 0


def labels(workdir: Path, name: str) -> list[str]:
    return [r["label"] for r in rows(workdir, name)]


def driver_pid(db_url: str, thread_id: str) -> int | None:
    """The pid in the lease owner of ``thread_id``'s run (store/drivers.py's id)."""
    db = Db.open(db_url)
    try:
        row = db.execute("SELECT owner FROM onward_leases WHERE thread_id = ?", (thread_id,))
        found = row.fetchone()
    finally:
        db.close()
    return int(found[0].split(":")[1]) if found else None


def test_runs_land_on_both_server_processes_and_each_finishes_once(
    db_url: str, workdir: Path
) -> None:
    argv = ("--run-slots", "12", "--user-runs", "12")  # one user ("local"), 12 runs
    with serving(db_url, workdir, 2, *argv, **FAST_LEASES) as (proc, url):
        children = server_processes(proc.pid)
        port = int(url.rsplit(":", 1)[1])
        seen: set[int] = set()

        def one(i: int) -> None:
            client = get_sync_client(url=url, api_key=None)
            tid = client.threads.create()["thread_id"]
            final = client.runs.wait(tid, "onward", input=chain(f"r{i}", seconds=0.5))
            assert isinstance(final, dict)
            assert done_steps(final) == {f"r{i}"}

        users = [threading.Thread(target=one, args=(i,)) for i in range(12)]
        for user in users:
            user.start()
        while any(u.is_alive() for u in users):  # which processes hold the users' connections
            for pid in children:
                if any(c.laddr.port == port and c.status == "ESTABLISHED" for c in _tcp(pid)):
                    seen.add(pid)
            time.sleep(0.05)
        assert seen == set(children)
        assert sorted(labels(workdir, "effects.jsonl")) == sorted(f"r{i}" for i in range(12))
        assert len(rows(workdir, "calls.jsonl")) == 12


def test_a_server_process_killed_mid_run_is_replaced_and_its_run_finished_once(
    db_url: str, workdir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "serve.log"
    with serving(db_url, workdir, 2, log=log, **FAST_LEASES) as (proc, url):
        client = get_sync_client(url=url, api_key=None)
        tid = client.threads.create()["thread_id"]
        run = client.runs.create(tid, "onward", input=chain("a", "b", "c", seconds=1.5))
        wait_until("step b to run", lambda: labels(workdir, "calls.jsonl") == ["a", "b"])
        killed = driver_pid(db_url, tid)
        assert killed in server_processes(proc.pid)
        os.kill(killed, signal.SIGKILL)
        # A connection that reaches the dying process's queue is reset (Linux drops a
        # closed listener's queue; docs/serving.md): the client joins once it is gone.
        wait_until("the killed process gone", lambda: killed not in server_processes(proc.pid))

        final = get_sync_client(url=url, api_key=None).runs.join(tid, run["run_id"])
        assert isinstance(final, dict)
        assert done_steps(final) == {"a", "b", "c"}
        assert final["status"] == "done"
        # No step lost, none done twice: a once; b, cut off mid-call, called again by the
        # process that took the run over, its effect once (record is idempotent).
        assert labels(workdir, "effects.jsonl") == ["a", "b", "c"]
        assert labels(workdir, "calls.jsonl").count("a") == 1
        wait_until("a new server process", lambda: len(server_processes(proc.pid)) == 2)
        assert killed not in server_processes(proc.pid)
        assert f"server process {killed} ended (signal 9)" in log.read_text()


def test_a_follow_up_queued_on_another_process_than_the_drives_streams_to_its_end(
    db_url: str, workdir: Path
) -> None:
    """A message sent while the thread's run goes on is queued by the process the
    client's connection reached, which starts it once the thread is free and streams it:
    its client's stream ends (it hung when the process driving the thread started it,
    since the client reads the feed of the process it asked). Until at least one follow-up
    was queued by the other process."""
    crossed = 0
    with serving(db_url, workdir, 2, **FAST_LEASES) as (_proc, url), Store(db_url) as store:
        for trial in range(16):
            client = get_sync_client(url=url, api_key=None)
            tid = client.threads.create()["thread_id"]
            client.runs.create(tid, "onward", input=chain(f"t{trial}", seconds=1.0))
            wait_until("its drive", lambda t=tid: driver_pid(db_url, t) is not None)
            first = driver_pid(db_url, tid)
            got: list[str] = []

            def follow(t: str = tid, into: list[str] = got) -> None:
                message = {"messages": [{"type": "human", "content": "and then?"}]}
                again = get_sync_client(url=url, api_key=None)
                into.extend(p.event for p in again.runs.stream(t, "onward", input=message))

            reader = threading.Thread(target=follow, daemon=True)
            reader.start()
            wait_until("the follow-up queued", lambda t=tid: store.threads.queued(t))
            (queued,) = store.threads.queued(tid)
            crossed += f":{first}:" not in str((queued.request or {}).get("by"))
            reader.join(30)
            assert not reader.is_alive(), f"trial {trial}: the follow-up's stream hung"
            assert got[-1:] == ["values"], got
            runs = client.runs.list(tid)
            assert sorted(r["status"] for r in runs) == ["success", "success"]
            if crossed and trial >= 3:
                break
    assert crossed


def test_two_messages_sent_at_once_through_two_processes_run_one_after_the_other(
    db_url: str, workdir: Path
) -> None:
    """Two follow-ups sent to one thread at the same instant, on connections that may
    reach different processes, run one after the other as they would on one process: the
    second waits its turn (``multitask_strategy`` enqueue), each ends success and each copy
    is made. Both had found the thread free when each process's own lock decided: one
    ended ``error`` or a 409, in most tries."""
    for k in (1, 2):
        (workdir / f"in{k}").mkdir()
        (workdir / f"in{k}" / "f.txt").write_text(str(k))
    with serving(db_url, workdir, 2, **FAST_LEASES) as (_proc, url):
        client = get_sync_client(url=url, api_key=None)
        for trial in range(6):
            tid = client.threads.create()["thread_id"]
            client.runs.wait(tid, "onward", input=chain(f"t{trial}"))
            at_once = threading.Barrier(2)
            failed: list[str] = []

            def send(
                k: int, t: str = tid, n: int = trial, into: list[str] = failed, go: Any = at_once
            ) -> None:
                text = f"copy every file in in{k}/ to out{n}-{k}/"
                own = get_sync_client(url=url, api_key=None)  # a connection of its own
                go.wait()
                try:
                    own.runs.wait(
                        t, "onward", input={"messages": [{"type": "human", "content": text}]}
                    )
                except Exception as exc:  # a 409: what one process would have queued
                    into.append(f"{k}: {exc}")

            senders = [threading.Thread(target=send, args=(k,)) for k in (1, 2)]
            for sender in senders:
                sender.start()
            for sender in senders:
                sender.join(60)
            assert not failed, f"trial {trial}: {failed}"
            runs = client.runs.list(tid)
            assert [r["status"] for r in runs] == ["success"] * 3, f"trial {trial}: {runs}"
            for k in (1, 2):
                assert (workdir / f"out{trial}-{k}" / "f.txt").read_text() == str(k), trial


def test_server_processes_that_keep_dying_stop_the_server_with_exit_1(
    db_url: str, workdir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "serve.log"
    proc, url = start_server(db_url, workdir, "--processes", "2", real=True, log=log)
    with reaped(proc) as seen:
        seen.update(listening(proc, url, 2))
        killed = 0
        while proc.poll() is None and killed <= MOST_RESTARTS + 1:
            children = server_processes(proc.pid)
            seen.update(children)
            if len(children) == 2:
                victim = children[0]
                os.kill(victim, signal.SIGKILL)
                killed += 1
                gone = lambda v=victim: v not in server_processes(proc.pid)  # noqa: E731
                wait_until("the kill to be seen", gone)
            time.sleep(0.05)
        assert proc.wait(30) == 1
    text = log.read_text()
    assert f"ended more than {MOST_RESTARTS} times within 60 s, so the server stops" in text
    assert "Traceback" not in text
    assert killed == MOST_RESTARTS + 1


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_server_that_cannot_start_says_so_once_with_the_exit_code_of_one_process(
    db_url: str, workdir: Path, processes: str
) -> None:
    argv = ["serve", "--db", db_url, "--port", str(free_port()), "--processes", processes]
    got = subprocess.run(
        onward_cmd(*argv, "--config", str(workdir / "missing.yaml")),
        cwd=workdir,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 2, got.stderr
    assert got.stderr.count("error:") == 1, got.stderr
    assert "missing.yaml" in got.stderr
    assert "Traceback" not in got.stderr
    assert "serving" not in got.stderr


def test_sigterm_drains_every_server_process_and_exits_0(db_url: str, workdir: Path) -> None:
    proc, url = start_server(db_url, workdir, "--processes", "3", real=True, **FAST_LEASES)
    with reaped(proc) as seen:
        children = listening(proc, url, 3)
        seen.update(children)
        client = get_sync_client(url=url, api_key=None)
        tid = client.threads.create()["thread_id"]
        run = client.runs.create(tid, "onward", input=chain("a", "b", seconds=1.0))
        wait_until("step a to run", lambda: labels(workdir, "calls.jsonl"))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert not [pid for pid in children if _alive(pid)]
    # The drained run goes on where it stopped, on the next server.
    again, url = start_server(db_url, workdir, real=True, **FAST_LEASES)
    with reaped(again):
        final = get_sync_client(url=url, api_key=None).runs.join(tid, run["run_id"])
        assert isinstance(final, dict)
        assert done_steps(final) == {"a", "b"}
        assert labels(workdir, "effects.jsonl") == ["a", "b"]


def test_server_processes_stop_when_their_parent_is_killed(db_url: str, workdir: Path) -> None:
    proc, url = start_server(db_url, workdir, "--processes", "2", real=True)
    with reaped(proc) as seen:
        children = listening(proc, url, 2)
        seen.update(children)
        proc.kill()
        proc.wait(10)
        gone = lambda: not any(_alive(p) for p in children)  # noqa: E731
        wait_until("the server processes to stop", gone, 30)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
