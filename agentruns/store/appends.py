"""Appends to a thread's log outside an executor (submission, resume, cancel, expiry, a
child run's hand-back to its parent). The thread row lock serialises them; an executor
never overlaps because these only touch runs that no worker holds. Matching webhooks'
deliveries are queued in the same transaction (OPS-4)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import Max

from agentruns.models import Event, Thread
from agentruns.store import store


def append_events(
    *, thread_id: int, run_id: int | None, items: Sequence[tuple[str, dict[str, Any]]]
) -> list[Event]:
    return append_attributed(
        thread_id=thread_id, items=[(run_id, kind, payload) for kind, payload in items]
    )


def append_attributed(
    *, thread_id: int, items: Sequence[tuple[int | None, str, dict[str, Any]]]
) -> list[Event]:
    """Each item with the run it belongs to, or None for the thread's history (a fork's
    copy of what came before the run it continues: FORK-1). A copied event (`copied_from`
    in its payload) was delivered to the webhooks when it happened, in its original."""
    Thread.objects.select_for_update().filter(pk=thread_id).values_list("pk", flat=True).get()
    last = Event.objects.filter(thread_id=thread_id).aggregate(last=Max("sequence"))["last"] or 0
    events = Event.objects.bulk_create(
        Event(thread_id=thread_id, run_id=run_id, sequence=last + i, type=kind, payload=payload)
        for i, (run_id, kind, payload) in enumerate(items, start=1)
    )
    fresh = [event for event in events if "copied_from" not in event.payload]
    if fresh:
        store().queue_deliveries(fresh)
    return events
