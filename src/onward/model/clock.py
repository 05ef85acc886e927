"""The clock records are stamped with: aware UTC. A module of its own so that the store's
tables (leases, events) load without the run state's models and LangGraph."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
