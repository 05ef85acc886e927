"""Assistants of ``onward serve``, versioned as on LangGraph Server.

An assistant is a named set of run rules (its ``context``: run policy, budget, whether a
model may plan) over onward's one graph. Every change is a new version; one version is the
latest, the one runs use. The operator's assistants (from ``onward serve --config``) have
no owner; one made over HTTP belongs to its creator.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from onward.model.clock import utcnow
from onward.store.connection import SharedConnection
from onward.store.sql import Db


@dataclass(frozen=True, slots=True)
class AssistantRow:
    assistant_id: str
    version: int
    graph_id: str
    name: str
    description: str | None
    context: dict[str, Any]
    metadata: dict[str, Any]
    owner: str | None
    """None: the operator's (from the server's configuration)."""
    created_at: datetime
    latest: bool


_COLUMNS = (
    "assistant_id, version, graph_id, name, description, context, metadata, owner, "
    "created_at, latest"
)


class Assistants:
    def __init__(self, connect: Callable[[], Db]) -> None:
        self._db = SharedConnection(connect)

    def close(self) -> None:
        self._db.close()

    def add_version(
        self,
        assistant_id: str,
        *,
        graph_id: str,
        name: str,
        description: str | None,
        context: dict[str, Any],
        metadata: dict[str, Any],
        owner: str | None,
    ) -> AssistantRow:
        """A new version, made the latest (version 1 creates the assistant)."""
        now = utcnow().isoformat()
        with self._db.use() as db, db.transaction():
            row = db.execute(
                "SELECT COALESCE(MAX(version), 0) FROM onward_assistants WHERE assistant_id = ?",
                (assistant_id,),
            ).fetchone()
            version = int(row[0]) + 1
            db.execute(
                "UPDATE onward_assistants SET latest = 0 WHERE assistant_id = ?", (assistant_id,)
            )
            db.execute(
                f"INSERT INTO onward_assistants ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                (
                    assistant_id,
                    version,
                    graph_id,
                    name,
                    description,
                    json.dumps(context),
                    json.dumps(metadata),
                    owner,
                    now,
                ),
            )
        found = self.get(assistant_id, version)
        assert found is not None
        return found

    def get(self, assistant_id: str, version: int | None = None) -> AssistantRow | None:
        """The latest version, or ``version``."""
        if version is None:
            rows = self._select("WHERE assistant_id = ? AND latest = 1", (assistant_id,))
        else:
            rows = self._select("WHERE assistant_id = ? AND version = ?", (assistant_id, version))
        return rows[0] if rows else None

    def latest(self) -> list[AssistantRow]:
        """Every assistant's latest version, oldest assistant first."""
        return self._select("WHERE latest = 1 ORDER BY created_at, assistant_id", ())

    def versions(self, assistant_id: str) -> list[AssistantRow]:
        """Newest first."""
        return self._select("WHERE assistant_id = ? ORDER BY version DESC", (assistant_id,))

    def set_latest(self, assistant_id: str, version: int) -> bool:
        """False when there is no such version (nothing changed)."""
        with self._db.use() as db, db.transaction():
            found = db.execute(
                "SELECT 1 FROM onward_assistants WHERE assistant_id = ? AND version = ?",
                (assistant_id, version),
            ).fetchone()
            if found is None:
                return False
            db.execute(
                "UPDATE onward_assistants SET latest = CASE WHEN version = ? THEN 1 ELSE 0 END "
                "WHERE assistant_id = ?",
                (version, assistant_id),
            )
        return True

    def delete(self, assistant_id: str) -> None:
        with self._db.use() as db:
            db.execute("DELETE FROM onward_assistants WHERE assistant_id = ?", (assistant_id,))

    def _select(self, where: str, params: tuple[Any, ...]) -> list[AssistantRow]:
        with self._db.use() as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM onward_assistants {where}", params
            ).fetchall()
        return [
            AssistantRow(
                r[0],
                int(r[1]),
                r[2],
                r[3],
                r[4],
                json.loads(r[5]),
                json.loads(r[6]),
                r[7],
                datetime.fromisoformat(r[8]),
                bool(r[9]),
            )
            for r in rows
        ]
