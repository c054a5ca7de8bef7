"""Connection handling the runtime shares: giving a pooled connection back while a run
waits (PERF-6), whether a step may skip waiting for the WAL flush (runtime/journal.py),
and the prepared statements of the loop."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper


def this_connection() -> BaseDatabaseWrapper:
    """The thread's connection object itself: `django.db.connection` is a proxy that
    costs a context-local lookup on every attribute, several per statement."""
    return connections[DEFAULT_DB_ALIAS]


def fast_commit(durable: bool) -> bool:
    """Only a statement that is its own transaction can relax its own commit (PostgreSQL:
    only `store/postgres.py` asks)."""
    if durable or not settings.AGENTRUNS_FAST_COMMIT:
        return False
    return this_connection().get_autocommit()


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
    db = this_connection()
    db.ensure_connection()
    started = time.monotonic()
    with db.wrap_database_errors, psycopg.Cursor(db.connection) as cursor:
        cursor.execute(sql, params, prepare=True)
        rows = cursor.fetchall()
    if db.queries_logged:
        db.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})
    return rows
