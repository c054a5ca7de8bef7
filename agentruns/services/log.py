"""The log outside an executor: appends (submission, resume, cancel, expiry; written in
`store.appends`, which a child run's hand-back uses too) and the reads a client advances a
cursor over."""

from __future__ import annotations

from agentruns.models import Event, Run
from agentruns.store import store
from agentruns.store.appends import append_attributed, append_events

__all__ = ["append_attributed", "append_events", "events_read"]


def events_read(*, run: Run, after: int, limit: int) -> list[Event]:
    """The run's events after the cursor, made durable before a client may advance it.

    A step may commit with `synchronous_commit=off` (runtime/journal.py): a database crash
    can then lose a tail a client has already read, and the lost sequence numbers are
    reused for different events, which an `?after=` cursor would skip. So this read
    commits (a flush to disk), and is a service, not a selector.
    """
    rows = list(Event.objects.filter(run=run, sequence__gt=after).order_by("sequence")[:limit])
    if rows:
        store().make_durable()
    return rows
