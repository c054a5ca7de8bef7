"""Persistence below the gate, the tools and the runtime: connection handling, the
wake-up outbox, run-status transitions and the loop's statements behind one interface
(`base.SystemStore`), whose implementation is chosen once, here. Nothing outside this
package asks which database it runs on (tests/test_layout.py checks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import DEFAULT_DB_ALIAS, connections

if TYPE_CHECKING:
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
