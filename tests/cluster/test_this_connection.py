"""`this_connection` hands each thread the connection object Django keeps for it (the
loop's statements, PERF-1), without Django's context-local lookup on every call, and
follows Django when its connections are replaced as a whole."""

from __future__ import annotations

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
