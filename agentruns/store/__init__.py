"""Persistence below the gate, the tools and the runtime: connection handling, the
wake-up outbox, run-status transitions and the loop's statements behind one interface
(`base.SystemStore`), whose implementation is chosen once, here. Nothing outside this
package asks which database it runs on (tests/test_layout.py checks)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connections

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from agentruns.store.base import SystemStore

_chosen: SystemStore | None = None


def on_postgres() -> bool:
    """Whether the default database is PostgreSQL (what production and the suite run;
    anything else is the embedded demo's SQLite)."""
    return connections[DEFAULT_DB_ALIAS].vendor == "postgresql"


def store() -> SystemStore:
    global _chosen
    if _chosen is None:
        if on_postgres():
            from agentruns.store.postgres import PostgresStore

            _chosen = PostgresStore()
        else:
            from agentruns.store.portable import PortableStore

            _chosen = PortableStore()
    return _chosen


def estimated_count(rows: QuerySet[Any]) -> int | None:
    """The planner's estimate of how many rows a query gives (PostgreSQL's EXPLAIN, no
    scan), or None where the database offers no cheap estimate."""
    if not on_postgres():
        return None
    plan = json.loads(rows.explain(format="json"))
    return int(plan[0]["Plan"]["Plan Rows"])
