"""Appends made outside an executor (submission, resume, cancel, expiry). The thread row
lock serialises them; an executor never overlaps because these only touch runs that no
worker holds. Matching webhooks' deliveries are queued in the same transaction (OPS-4)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import Max

from agentruns.models import Event, Thread
from agentruns.store import store


def append_events(
    *, thread_id: int, run_id: int | None, items: Sequence[tuple[str, dict[str, Any]]]
) -> list[Event]:
    Thread.objects.select_for_update().filter(pk=thread_id).values_list("pk", flat=True).get()
    last = Event.objects.filter(thread_id=thread_id).aggregate(last=Max("sequence"))["last"] or 0
    events = Event.objects.bulk_create(
        Event(thread_id=thread_id, run_id=run_id, sequence=last + i, type=kind, payload=payload)
        for i, (kind, payload) in enumerate(items, start=1)
    )
    if events:
        store().queue_deliveries(events)
    return events
