"""What nodes need from outside the state: the tool registry and the artifact store."""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig

from onward.checkpointing.savers import HeldRows
from onward.effects.ledger import Ledger
from onward.model.state import ArtifactRef, utcnow
from onward.observe.events import EventLog
from onward.store.artifacts import ArtifactStore
from onward.store.breakers import Breakers
from onward.tools.registry import Registry
from onward.verification.checks import CheckContext


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeDeps:
    registry: Registry
    """Tools plans may use."""
    artifacts: ArtifactStore
    """Where step outputs live (content-addressed)."""
    ledger: Ledger | None = None
    """The effect ledger; without one (diagrams, `langgraph dev` export) non-pure tools
    cannot run exactly once, and execute refuses them."""
    events: EventLog | None = None
    """The run's append-only event log (audit records such as a refused approval)."""
    held: HeldRows | None = None
    """Where a node leaves its event rows for the checkpoint saver, which commits them with
    the node's writes (None: the node records them itself, e.g. compiled without a saver)."""
    clock: Callable[[], datetime] = field(default=utcnow)
    """Where "now" comes from (injectable, so deadlines are testable without sleeping)."""
    breakers: Breakers | None = None
    """Circuit breakers shared by every run on the store."""
    sleep: Callable[[float], None] = field(default=time.sleep)
    """How the wait node waits (injectable: tests record the backoff instead of sleeping)."""
    rng: random.Random = field(default_factory=random.Random)
    """Jitter for backoff delays."""
    model: BaseChatModel | None = None
    """The chat model for planning goals outside the templates, replanning and judging
    (None: onward works without one)."""
    draining: threading.Event = field(default_factory=threading.Event)
    """Set when the process must stop (a worker's SIGTERM): nodes not yet started raise
    :class:`~onward.errors.DrainRequested`, so the drive ends on a saved superstep."""
    cancelling: threading.Event = field(default_factory=threading.Event)
    """Set with ``draining`` by a cancel (``onward serve``'s ``runs.cancel``): a step
    already produced is still verified (no effect, reproducible), so the stopped run's
    state shows what ran; every other node drains."""
    max_wait: timedelta = timedelta(seconds=60)
    """Longest in-process wait for a retry or a breaker; a longer one suspends the run until
    then ($ONWARD_MAX_WAIT)."""

    def check_context(
        self, workdir: str, refs: dict[str, ArtifactRef], *, confined: bool
    ) -> CheckContext:
        """``confined``: the run's policy ``confine_paths`` (check paths stay in workdir)."""

        def value_of(name: str) -> Any:
            if name not in refs:
                raise KeyError(f"artifact {name!r} has not been produced yet")
            return self.artifacts.get(refs[name])

        return CheckContext(workdir_path(workdir), value_of, confined=confined)


@functools.lru_cache(maxsize=64)
def workdir_path(workdir: str) -> Path:
    """A run's work directory as a Path, built once per directory: a Path is immutable, so
    one serves every step (building one was a measurable part of a no-op step, twice)."""
    return Path(workdir)


def thread_of(config: RunnableConfig) -> str:
    """The thread id a node runs for."""
    return str(config.get("configurable", {}).get("thread_id", ""))
