"""The one reader of a thread's log (LOOP-3): event rows as the runtime, the services and
the selectors read them, `LogEntry`s in log order. The step statement's claim reads the
same columns as JSON (store/postgres.py), the portable store through `LOG_FIELDS`."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import QuerySet

from agentruns.events import LogEntry
from agentruns.models import Event
from agentruns.store.records import LogRow

# An event's columns as a log row (`LogRow`) holds them.
LOG_FIELDS = ("sequence", "type", "payload", "run_id")


def entries(rows: Iterable[LogRow]) -> list[LogEntry]:
    """Log rows, as the store read them, as entries."""
    return [LogEntry(*row) for row in rows]


def log_entries(events: QuerySet[Event]) -> list[LogEntry]:
    """The events in log order."""
    return entries(events.order_by("sequence").values_list(*LOG_FIELDS))


def logs_by_thread(events: QuerySet[Event]) -> dict[int, list[LogEntry]]:
    """The events of several threads, each thread's in log order, by thread id."""
    logs: dict[int, list[LogEntry]] = {}
    rows = events.order_by("thread", "sequence").values_list("thread", *LOG_FIELDS)
    for thread_id, *row in rows:
        logs.setdefault(thread_id, []).append(LogEntry(*row))
    return logs
