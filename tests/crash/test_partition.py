"""A network partition between a driver and PostgreSQL (issue 37), through a TCP proxy
(tests/support/tcpproxy.py): driver A's connections go through the proxy, the partition outlasts
A's lease, driver B (connected directly) takes the run over, finds A's POST in flight
``started`` and asks a person. When the partition heals, A writes nothing: its heartbeat,
step record, checkpoint and the next step's POST are refused by the lease's fencing
epoch, A exits 4, B's question is still in the inbox, each key was POSTed once.

Two partitions: ``blackhole`` holds every byte with the connections left open (the
statements A sent arrive after the heal), ``reset`` drops A's connections and refuses new
ones (A's outage retries reconnect after the heal). Postgres only: SQLite has no network.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from onward import Onward
from tests.support import zygote
from tests.support.common import cli_env, postgres_schema
from tests.support.fencing import LEASE, NO_PROXY, POSTS_APPROVED, _cli, _posts, _store_of, _until
from tests.support.httpfake import FakeService
from tests.support.tcpproxy import TcpProxy

IN_FLIGHT = 3.0
"""The service's delay: the partition starts while A's POST is stored and unanswered."""


def through(url: str, port: int) -> str:
    parts = urlsplit(url)
    host = f"{parts.username}@127.0.0.1:{port}" if parts.username else f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=host))


@pytest.mark.parametrize("mode", ["blackhole", "reset"])
def test_a_partitioned_driver_writes_nothing_after_the_heal(tmp_path: Path, mode: str) -> None:
    with postgres_schema() as db, FakeService(delay=IN_FLIGHT) as service:
        target = urlsplit(db)
        with TcpProxy((target.hostname or "127.0.0.1", target.port or 5432)) as proxy:
            env = cli_env(
                **LEASE,
                **NO_PROXY,
                ONWARD_HTTP_ALLOW=f"127.0.0.1:{service.port}",
                ONWARD_PG_OUTAGE="60",
            )
            with Onward(db, model=None) as ow:
                thread_id = ow.start(plan=_posts(service), workdir=tmp_path, policy=POSTS_APPROVED)
            a = zygote.spawn(
                ["resume", thread_id, "--db", through(db, proxy.port), "--json"],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                _until(lambda: bool(service.counts) or a.poll() is not None, "A's first POST")
                assert a.poll() is None, a.communicate()
                proxy.partition(mode)  # A's POST is in flight; A cannot reach the database
                b = zygote.run(
                    ["resume", thread_id, "--takeover", "--db", db, "--json"],
                    cwd=tmp_path,
                    env=env,
                    timeout=60,
                )
                assert json.loads(b.stdout)["status"] == "waiting_for_human", b.stderr
                after_b = _store_of(db, thread_id)
                proxy.heal()
                out, err = a.communicate(timeout=90)
            finally:
                if a.poll() is None:
                    a.kill()
            posts = dict(service.counts)
            payloads = [p.body["event"] for p in service.posts if isinstance(p.body, dict)]
        assert a.returncode == 4, out + err
        assert f"lost the lease on run {thread_id}" in out + err
        [question] = _cli(db, tmp_path, "inbox")
        assert (question["thread_id"], question["step_id"]) == (thread_id, "post-1")
        assert _cli(db, tmp_path, "status", thread_id)["status"] == "waiting_for_human"
        assert _store_of(db, thread_id) == after_b  # nothing of A's after B
        assert after_b["effects"] == [("post-1", "started", 1)]
        assert payloads == ["e1"]
        assert list(posts.values()) == [1]
