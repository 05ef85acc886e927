"""Many users at once: ``onward serve`` (SQLite, Postgres) against ``langgraph dev`` (the same
onward graph on LangGraph's in-memory server, as langgraph.json configures it), each
user an unmodified ``langgraph_sdk`` client streaming runs of a 3-step no-op plan, each
on a new thread.

For 1, 10 and 50 concurrent users, servers interleaved round by round (medians over the
rounds): runs/s, p50 and p95 seconds per run, median time to the first streamed event,
errors (any run that did not end ``done``, any HTTP error), the server's CPU per run and
RSS after the round (its process and children, psutil), and on Postgres the most
connections the server held (``pg_stat_activity`` by its ``application_name``). The
clients share the host with the server: ``client ms`` is the CPU a user's own thread
spends on a run (its requests, and parsing what comes back), ``kB/run`` the event data it
receives (as JSON), ``idle%`` the host's idle CPU share during the round, ``host ms``
the CPU the whole host spent a run (server, clients, database, all CPUs), ``db ms`` the
Postgres server's processes' share of it; on a host without idle CPU, runs/s is what the
server, its database and its clients together cost. By default the users are threads
of this one process, whose own lock lets one run Python at a time: at 50 users it can
be the slowest part, and the bigger a server's events the more it slows every user.
``--clients K`` shares them out to K client processes, as users on their own machines
are.

    python bench/serve_users.py [--users 1,10,50] [--rounds 2] [--runs-per-user 2]
    python bench/serve_users.py --levelling 2000 --users 10   # RSS every 500 runs
    python bench/serve_users.py --servers sqlite --users 10 --py-spy DIR   # a profile

``--servers``: which of ``sqlite``, ``postgres``, ``dev`` to run (all by default);
``--before DIR``: also run each chosen onward server from the source tree DIR (e.g. a
``git worktree`` of an earlier commit), interleaved with this tree's, named ``before ...``;
``--py-spy DIR``: each server sampled by py-spy (plain mode, raw collapsed stacks) while
the users run, into ``DIR/<server>-<users>-<round>.txt``; ``--run-slots N``: the onward
servers' run slots (by default the server's own, 8); ``--processes N``: also this tree's
onward servers with N processes (``onward serve --processes N``), named ``onward xN ...``
(their CPU and RSS are all their processes'); ``--floor``: after the table, the same run
through ``Onward.run`` on each chosen backend, in one process, one run after another,
without HTTP: its CPU, Postgres's and the host's per run. ``own+db`` is the least a
served run costs the host's server side (the serving process and its database); set
against ``langgraph dev``'s ``CPU ms/run`` it tells how much room HTTP work has before
onward's runs/s falls behind on a host without idle CPU. ``--plain``: each onward server
(this tree's and ``--before``'s) runs as it does where uvloop and httptools cannot be
imported (Windows, or an install without them): uvicorn then serves on asyncio's loop and
h11 (named ``... plain``).

Each user sends its own API token to ``onward serve`` (``$ONWARD_API_TOKENS``), as the
users of a deployment do, so the server's run slots and per-user cap apply as shipped;
``langgraph dev`` takes no token.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from langgraph_sdk import get_sync_client

from _common import PG_URL, pg_durability, pg_schema, sampled, sqlite_durability

MAX_USERS = 256
PLAIN = (
    "import sys; sys.modules['uvloop'] = sys.modules['httptools'] = None; "
    "sys.argv[0] = 'onward'; from onward.cli import main; main()"
)
"""``python -c`` that runs onward's CLI as if uvloop and httptools were not installed."""
"""Tokens the onward servers accept (``--users`` at most this)."""
CLIENTS: list[int] = []
"""``--clients``: the users shared out to this many client processes (none: all in this one)."""
RUN_SLOTS: list[int] = []
"""``--run-slots``: the onward servers' $ONWARD_RUN_SLOTS (none: the server's default)."""
ROOT = Path(__file__).resolve().parent.parent
STEPS = [
    {
        "id": f"s{i}",
        "tool": "noop",
        "args": {"value": i},
        **({"depends_on": [f"s{i - 1}"]} if i else {}),
    }
    for i in range(3)
]


@dataclass
class Server:
    name: str
    url: str
    pid: int
    app: str | None
    """``application_name`` of its Postgres connections (None: no Postgres)."""
    run_input: Callable[[Path], dict[str, Any]]
    workdir: Path
    tokens: bool = False
    """Each user sends its own API token (``onward serve``: $ONWARD_API_TOKENS)."""

    def key(self, user: int) -> str | None:
        return f"bench-token-{user}" if self.tokens else None


def onward_input(_workdir: Path) -> dict[str, Any]:
    return {"goal": "three no-op steps", "plan": {"steps": STEPS}}


def graph_input(workdir: Path) -> dict[str, Any]:
    """The same run as ``langgraph dev``'s graph takes it: the state's own fields."""
    return {
        "goal": {"objective": "three no-op steps"},
        "plan": {"steps": STEPS},
        "workdir": str(workdir),
    }


def wait_ok(url: str, proc: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/ok", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}")
        time.sleep(0.2)
    raise RuntimeError("server did not answer /ok")


@contextmanager
def started(
    argv: list[str], port: int, env: dict[str, str], workdir: Path
) -> Iterator[tuple[str, int]]:
    proc = subprocess.Popen(
        argv,
        cwd=workdir,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ok(url, proc)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(30)


def onward_server(
    stack: ExitStack,
    name: str,
    db: str,
    port: int,
    app: str | None,
    src: Path | None = None,
    processes: int = 1,
    plain: bool = False,
) -> Server:
    """``onward serve`` on ``db``; from the source tree ``src`` when given (its ``src``
    folder first on the path), else the installed package; ``processes``: its
    ``--processes``; ``plain``: without uvloop and httptools."""
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
    # Each user its own token, as a deployment has them: the server's own run slots and
    # per-user cap apply (RUN_SLOTS: the server's default unless --run-slots).
    env = {"ONWARD_API_TOKENS": ",".join(f"bench-token-{i}:user{i}" for i in range(MAX_USERS))}
    if RUN_SLOTS:
        env |= {"ONWARD_RUN_SLOTS": str(RUN_SLOTS[0]), "ONWARD_USER_RUNS": "2"}
    if src is not None:
        env["PYTHONPATH"] = str(src.resolve() / "src")
    if app:
        env["PGAPPNAME"] = app
    argv = [sys.executable, "-m", "onward", "serve", "--db", db, "--port", str(port)]
    if plain:  # uvicorn's "auto" loop and parser fall back when these cannot be imported
        argv[1:3] = ["-c", PLAIN]
    argv += ["--processes", str(processes)] if processes > 1 else []
    url, pid = stack.enter_context(started(argv, port, env, workdir))
    return Server(name, url, pid, app, onward_input, workdir, tokens=True)


def langgraph_dev(stack: ExitStack, port: int) -> Server:
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
    langgraph = shutil.which("langgraph", path=str(Path(sys.executable).parent))
    assert langgraph, "langgraph-cli[inmem] is part of the dev extra"
    env = {
        "ONWARD_DB": f"sqlite:///{workdir}/dev.db",
        "LANGGRAPH_STRICT_MSGPACK": "true",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
        "N_JOBS_PER_WORKER": "64",
    }
    argv = [langgraph, "dev", "--no-browser", "--no-reload", "--port", str(port)]
    argv += ["--config", str(ROOT / "langgraph.json")]
    url, pid = stack.enter_context(started(argv, port, env, workdir))
    return Server("langgraph dev", url, pid, None, graph_input, workdir)


@dataclass
class Round:
    seconds: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    errors: int = 0
    client_cpu: list[float] = field(default_factory=list)
    data_kb: list[float] = field(default_factory=list)
    idle: float = 0.0
    """The host's idle share of its CPUs during the round (psutil)."""
    why: Counter[str] = field(default_factory=Counter)
    wall: float = 0.0
    cpu: float = 0.0
    host: float = 0.0
    """CPU seconds the whole host was busy during the round (psutil): server, clients, database."""
    db: float = 0.0
    """CPU seconds of the Postgres server's processes during the round (0: not Postgres)."""
    rss_mb: float = 0.0
    peak: int = 0


@dataclass
class Ran:
    """One user's run as the user saw it."""

    seconds: float
    first: float
    """Seconds to the first event."""
    why: str | None
    """Why it did not end done (None: it did)."""
    client_cpu: float = 0.0
    """CPU seconds of the user's own thread: its requests, and parsing what came back."""
    data_kb: float = 0.0
    """kB of event data received (the parsed ``data`` of each event, as JSON)."""


def one_run(server: Server, user: int) -> Ran:
    cpu0 = time.thread_time()
    got = _one_run(server, user)
    got.client_cpu = time.thread_time() - cpu0
    return got


def _one_run(server: Server, user: int) -> Ran:
    client = get_sync_client(url=server.url, api_key=server.key(user))
    t0 = time.perf_counter()
    first = float("nan")
    last: Any = None
    size = 0
    try:
        thread_id = client.threads.create()["thread_id"]
        for part in client.runs.stream(
            thread_id, "onward", input=server.run_input(server.workdir), stream_mode="values"
        ):
            if first != first:
                first = time.perf_counter() - t0
            size += len(json.dumps(part.data))
            if part.event == "values":
                last = part.data
            if part.event == "error":
                why = f"error event: {_short(part.data)}"
                return Ran(time.perf_counter() - t0, first, why, data_kb=size / 1000)
    except Exception as exc:
        why = f"{type(exc).__name__}: {_short(exc)}"
        return Ran(time.perf_counter() - t0, first, why, data_kb=size / 1000)
    status = last.get("status") if isinstance(last, dict) else None
    why = None if status == "done" else f"ended {status!r}"
    return Ran(time.perf_counter() - t0, first, why, data_kb=size / 1000)


def _short(what: object) -> str:
    """An error's text without what differs run to run (ids), so equal causes count once."""
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "<id>", str(what))
    return re.sub(r"\s+", " ", text)[:160]


def tree(pid: int) -> list[psutil.Process]:
    proc = psutil.Process(pid)
    return [proc, *proc.children(recursive=True)]


def cpu_of(pid: int) -> float:
    return sum(p.cpu_times().user + p.cpu_times().system for p in tree(pid))


def host_busy() -> float:
    """CPU seconds the host has been busy, all its CPUs together."""
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0))


def postgres_cpu() -> float:
    """CPU seconds of the running ``postgres`` processes (the server's pool keeps its
    backends, so a round's difference is what the database spent on it)."""
    total = 0.0
    for proc in psutil.process_iter(["name"]):
        if (proc.info["name"] or "").startswith("postgres"):
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                total += times.user + times.system
    return total


def connections(conn: Any, app: str) -> int:
    """The connections of the server's ``application_name``, counted on ``conn``: one
    connection for a round's samples. A new one per sample (as before) cost the host
    5.1 ms of CPU each, a backend's start: 51 ms a second taken from the Postgres servers
    under measurement and counted in their ``host ms`` (about 3 ms a run at 17 runs/s);
    the ``db ms`` column never saw it (a backend gone is not summed)."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
    ).fetchone()
    return int(row[0]) if row else 0


def measure(server: Server, users: int, runs_per_user: int, spy: Path | None = None) -> Round:
    out = Round()
    stop = threading.Event()

    def sample() -> None:
        if not server.app:
            return
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            while not stop.wait(0.1):
                out.peak = max(out.peak, connections(conn, server.app))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with sampled(server.pid, spy), ThreadPoolExecutor(users) as pool:
        cpu0, t0 = cpu_of(server.pid), time.perf_counter()
        host0, db0 = host_busy(), postgres_cpu() if server.app else 0.0
        psutil.cpu_times_percent()  # from here
        results = users_run(server, users, runs_per_user, pool)
        out.wall, out.cpu = time.perf_counter() - t0, cpu_of(server.pid) - cpu0
        out.idle = float(psutil.cpu_times_percent().idle) / 100
        out.host = host_busy() - host0
        out.db = postgres_cpu() - db0 if server.app else 0.0
    stop.set()
    sampler.join()
    out.rss_mb = sum(p.memory_info().rss for p in tree(server.pid)) / 1e6
    for ran in results:
        out.seconds.append(ran.seconds)
        out.first.append(ran.first)
        out.client_cpu.append(ran.client_cpu)
        out.data_kb.append(ran.data_kb)
        out.errors += ran.why is not None
        if ran.why is not None:
            out.why[ran.why] += 1
    return out


def users_run(
    server: Server, users: int, runs_per_user: int, pool: ThreadPoolExecutor
) -> list[Ran]:
    """Each user's runs, one after another, the users at once: on ``pool``'s threads in
    this process, or (``--clients K``) shared out to K client processes."""
    if not CLIENTS:
        return list(pool.map(lambda i: one_run(server, i % users), range(users * runs_per_user)))
    shares = [list(range(k, users, CLIENTS[0])) for k in range(min(CLIENTS[0], users))]
    fork = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(len(shares), mp_context=fork) as clients:
        done = clients.map(
            client_share, [server] * len(shares), shares, [runs_per_user] * len(shares)
        )
        return [ran for share in done for ran in share]


def client_share(server: Server, users: list[int], runs_per_user: int) -> list[Ran]:
    """A client process's users, each on its own thread."""
    with ThreadPoolExecutor(len(users)) as pool:
        runs = [u for u in users for _ in range(runs_per_user)]
        return list(pool.map(lambda u: one_run(server, u), runs))


def p95(xs: list[float]) -> float:
    return sorted(xs)[max(0, round(0.95 * len(xs)) - 1)]


def report(name: str, users: int, rounds: list[Round]) -> None:
    runs = [len(r.seconds) for r in rounds]
    rate = statistics.median(n / r.wall for n, r in zip(runs, rounds, strict=True))
    p50 = statistics.median(statistics.median(r.seconds) for r in rounds)
    q95 = statistics.median(p95(r.seconds) for r in rounds)
    first = statistics.median(statistics.median(r.first) for r in rounds)
    cpu = statistics.median(r.cpu / n for n, r in zip(runs, rounds, strict=True))
    errors = sum(r.errors for r in rounds)
    peak = max(r.peak for r in rounds)
    rss = rounds[-1].rss_mb
    client = statistics.median(statistics.median(r.client_cpu) for r in rounds)
    data = statistics.median(statistics.median(r.data_kb) for r in rounds)
    idle = statistics.median(r.idle for r in rounds)
    host = statistics.median(r.host / n for n, r in zip(runs, rounds, strict=True))
    db = statistics.median(r.db / n for n, r in zip(runs, rounds, strict=True))
    print(
        f"{name:>18} {users:5} {rate:7.2f} {p50:7.2f} {q95:7.2f} {first * 1000:8.0f} "
        f"{errors:3}/{sum(runs):<4} {cpu * 1000:8.1f} {peak or '-':>5} {rss:7.0f} "
        f"{client * 1000:8.1f} {data:6.1f} {idle * 100:5.0f} {host * 1000:8.1f} "
        f"{(f'{db * 1000:.1f}' if db else '-'):>6}",
        flush=True,
    )
    causes = sum((r.why for r in rounds), Counter[str]())
    for why, n in causes.most_common():
        print(f"{'':>18} {n:5} x {why}", flush=True)


FLOOR_RUNS = 200
"""Runs the no-HTTP floor (:func:`floor`) measures, after a warm-up of 20."""


def floor(db: str, workdir: Path) -> tuple[float, float, float]:
    """The same 3-step run through ``Onward.run`` on ``db``, in a process of its own, one
    run after another, no HTTP: (its CPU, Postgres's CPU, the host's CPU) per run, in
    seconds. What a served run cannot cost less than, whatever its HTTP work."""
    argv = [sys.executable, __file__, "--floor-child", db]
    proc = subprocess.Popen(
        argv, cwd=workdir, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"  # warmed up
    db0, host0 = postgres_cpu(), host_busy()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    own = float(proc.stdout.readline())
    pg, host = postgres_cpu() - db0, host_busy() - host0
    proc.wait(60)
    return own / FLOOR_RUNS, (pg / FLOOR_RUNS if "postgresql" in db else 0.0), host / FLOOR_RUNS


def runs_alone(ow: Any, n: int) -> None:
    """``n`` of the users' runs (:data:`STEPS`) through ``Onward.run``, one after another."""
    for _ in range(n):
        ow.run("three no-op steps", plan={"steps": STEPS})


def floor_child(db: str) -> None:
    """:func:`floor`'s process: warm up, say ``ready``, run on ``go``, print its CPU."""
    from onward import Onward

    with Onward(db) as ow:
        runs_alone(ow, 20)
        print("ready", flush=True)
        sys.stdin.readline()
        cpu0 = time.process_time()
        runs_alone(ow, FLOOR_RUNS)
        print(time.process_time() - cpu0, flush=True)


def report_floors(chosen: set[str], tmp: Path) -> None:
    """:func:`floor` of each chosen backend, and what it leaves of a run served at the
    CPU ``langgraph dev`` spent on it: its CPU ms/run column against ``own + db`` here."""
    print(f"no HTTP: Onward.run, one process, {FLOOR_RUNS} runs one after another")
    print(f"{'store':>18} {'CPU ms/run':>10} {'db ms/run':>9} {'own+db':>7} {'host ms':>8}")
    for backend in ("sqlite", "postgres"):
        if backend not in chosen:
            continue
        with ExitStack() as stack:
            if backend == "postgres":
                db = stack.enter_context(pg_schema())
            else:
                db = f"sqlite:///{tmp}/floor.db"
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            own, pg, host = floor(db, workdir)
        print(
            f"{'Onward.run ' + backend:>18} {own * 1000:10.1f} "
            f"{(f'{pg * 1000:.1f}' if pg else '-'):>9} {(own + pg) * 1000:7.1f} "
            f"{host * 1000:8.1f}",
            flush=True,
        )


def levelling(total: int, users: int, port: int) -> None:
    """RSS of ``onward serve`` (SQLite) after every 500 of ``total`` runs by ``users``."""
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        server = onward_server(stack, "onward sqlite", f"sqlite:///{tmp}/serve.db", port, None)
        done = 0
        print(f"{'runs':>6} {'RSS MB':>7} {'errors':>6}", flush=True)
        while done < total:
            got = measure(server, users, max(1, 500 // users))
            done += len(got.seconds)
            print(f"{done:6} {got.rss_mb:7.0f} {got.errors:6}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levelling", type=int, default=0, help="RSS over this many runs")
    parser.add_argument("--users", default="1,10,50")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runs-per-user", type=int, default=2)
    parser.add_argument("--port", type=int, default=8460)
    parser.add_argument("--servers", default="sqlite,postgres,dev")
    parser.add_argument("--py-spy", type=Path, help="sample each server into this folder")
    parser.add_argument("--before", type=Path, help="also serve from this source tree")
    parser.add_argument("--run-slots", type=int, help="the onward servers' run slots")
    parser.add_argument(
        "--processes", type=int, default=1, help="also this tree's servers with this many processes"
    )
    parser.add_argument(
        "--floor", action="store_true", help="also each backend's run without HTTP (Onward.run)"
    )
    parser.add_argument(
        "--plain", action="store_true", help="onward servers without uvloop and httptools"
    )
    parser.add_argument("--clients", type=int, help="the users in this many client processes")
    parser.add_argument("--floor-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_child:
        floor_child(args.floor_child)
        return
    chosen = set(args.servers.split(","))
    if max(int(u) for u in args.users.split(",")) > MAX_USERS:
        parser.error(f"--users: at most {MAX_USERS}")
    if args.run_slots:
        RUN_SLOTS.append(args.run_slots)
    if args.clients:
        CLIENTS.append(args.clients)
    if args.py_spy:
        args.py_spy.mkdir(parents=True, exist_ok=True)
    if args.levelling:
        levelling(args.levelling, int(args.users.split(",")[-1]), args.port)
        return
    app = f"onward-bench-{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        servers = []
        trees = [("onward", None, 0, 1)] + ([("before", args.before, 3, 1)] if args.before else [])
        if args.processes > 1:
            trees.append((f"onward x{args.processes}", None, 5, args.processes))
        for label, src, shift, processes in trees:
            at = app + "-" + label.replace(" ", "-")
            both = f"{label} sqlite", f"{label} postgres"
            if args.plain:
                both = f"{label} sqlite plain", f"{label} pg plain"
            if "sqlite" in chosen:
                db = f"sqlite:///{tmp}/{label.replace(' ', '-')}.db"
                server = onward_server(
                    stack, both[0], db, args.port + shift, None, src, processes, args.plain
                )
                servers.append(server)
            if "postgres" in chosen:
                pg = stack.enter_context(pg_schema())
                server = onward_server(
                    stack, both[1], pg, args.port + 1 + shift, at, src, processes, args.plain
                )
                servers.append(server)
        if "dev" in chosen:
            servers.append(langgraph_dev(stack, args.port + 2))
        stated = [sqlite_durability()] if "sqlite" in chosen else []
        stated += [pg_durability()] if "postgres" in chosen else []
        if "dev" in chosen:
            stated.append("langgraph dev: checkpoints in memory (no durability to set)")
        print("durability (read back):", "; ".join(stated))
        print(
            f"{'server':>18} {'users':>5} {'runs/s':>7} {'p50 s':>7} {'p95 s':>7} "
            f"{'1st ms':>8} {'errors':>8} {'CPU ms/run':>8} {'conns':>5} {'RSS MB':>7} "
            f"{'client ms':>8} {'kB/run':>6} {'idle%':>5} {'host ms':>8} {'db ms':>6}"
        )
        for users in (int(x) for x in args.users.split(",")):
            got: dict[str, list[Round]] = {s.name: [] for s in servers}
            for n in range(args.rounds):  # interleaved: each server once per round
                for server in servers:
                    name = f"{server.name.replace(' ', '-')}-{users}-{n}.txt"
                    spy = args.py_spy / name if args.py_spy else None
                    got[server.name].append(measure(server, users, args.runs_per_user, spy))
            for server in servers:
                report(server.name, users, got[server.name])
        if args.floor:
            report_floors(chosen, tmp)


if __name__ == "__main__":
    main()
