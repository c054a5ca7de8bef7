"""`this_connection` hands each thread the connection object Django keeps for it (the
loop's statements, PERF-1), without Django's context-local lookup on every call, and
follows Django when its connections are replaced as a whole."""

from __future__ import annotations

import asyncio
import threading

from asgiref.local import Local
from django.db import DEFAULT_DB_ALIAS, connections

from agentruns.store.connection import this_connection


def test_each_thread_is_handed_the_connection_django_keeps_for_it() -> None:
    seen: dict[str, object] = {}

    def other() -> None:
        seen["ours"], seen["django"] = this_connection(), connections[DEFAULT_DB_ALIAS]
        seen["again"] = this_connection()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert this_connection() is connections[DEFAULT_DB_ALIAS]
    assert seen["ours"] is seen["django"] is seen["again"]
    assert seen["ours"] is not this_connection()


def test_connections_replaced_as_a_whole_are_followed() -> None:
    before = this_connection()
    kept = connections._connections  # type: ignore[attr-defined]
    connections._connections = Local(connections.thread_critical)  # type: ignore[attr-defined]
    try:
        replaced = this_connection()
        assert replaced is connections[DEFAULT_DB_ALIAS]
        assert replaced is not before
    finally:
        connections._connections = kept  # type: ignore[attr-defined]
    assert this_connection() is before


def test_code_run_while_an_event_loop_runs_is_handed_what_django_hands_it() -> None:
    """With a loop running in the thread (Playwright's sync API runs one), Django keeps a
    connection per context: the step must go where the caller's transaction is."""
    outside = this_connection()

    async def inside() -> tuple[object, object]:
        return this_connection(), connections[DEFAULT_DB_ALIAS]

    ours, django = asyncio.run(inside())
    assert ours is django
    assert ours is not outside
    assert this_connection() is outside
