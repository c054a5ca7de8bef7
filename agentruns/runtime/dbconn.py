"""Connection handling the runtime shares: giving a pooled connection back while a run
waits (PERF-6), and whether a step may skip waiting for the WAL flush (journal.py)."""

from __future__ import annotations

import time
from typing import Any

import psycopg
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


def prepared(sql: str, params: list[Any]) -> tuple:
    """The statement's one row (see `prepared_rows`)."""
    rows = prepared_rows(sql, params)
    assert rows, "the statement returned no row"
    return rows[0]


def prepared_rows(sql: str, params: list[Any]) -> list[tuple]:
    """Run a statement the loop repeats with server-side parameters, prepared once per
    connection: a step's statement has one of a few shapes, and planning it anew each time
    would cost more than executing it. Logged like any Django query."""
    connection.ensure_connection()
    started = time.monotonic()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params, prepare=True)
        rows = cursor.fetchall()
    if connection.queries_logged:
        connection.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})
    return rows
