"""Connection handling the runtime shares: giving a pooled connection back while a run
waits (PERF-6), and whether a step may skip waiting for the WAL flush (journal.py)."""

from __future__ import annotations

from django.conf import settings
from django.db import connection


def fast_commit(durable: bool) -> bool:
    """Only a statement that is its own transaction can relax its own commit."""
    return bool(
        not durable
        and settings.AGENTRUNS_FAST_COMMIT
        and connection.vendor == "postgresql"
        and connection.get_autocommit()
    )


def release_connection() -> None:
    """A no-op without a pool."""
    if connection.settings_dict.get("OPTIONS", {}).get("pool") and connection.get_autocommit():
        connection.close()
