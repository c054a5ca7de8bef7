"""Fenced appends to the log (LOOP-3, CLU-2).

One statement inserts a step's events only while the run still carries this worker's
epoch, takes a share lock on the run row until commit (so a concurrent claim waits for it
and then reads it), and returns the run's cancel flag and the catalog generation. A step
therefore costs no extra round trip to learn whether it was cancelled or whether the
configuration changed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.utils import timezone

from agentruns.errors import Fenced
from agentruns.models import CatalogGeneration, Event, Run
from agentruns.runtime.lease import Lease
from agentruns.runtime.state import Ev


def _sql(rows: int) -> str:
    postgres = connection.vendor == "postgresql"
    jsonb, ts, lock = ("::jsonb", "::timestamptz", " FOR SHARE") if postgres else ("", "", "")
    run, event = Run._meta.db_table, Event._meta.db_table
    generation = CatalogGeneration._meta.db_table
    row = f"SELECT %s, %s, %s, %s, %s{jsonb}, %s{ts}"
    values = " UNION ALL ".join([row] * rows)
    return (
        f"INSERT INTO {event} (thread_id, run_id, sequence, type, payload, created_at) "
        f"SELECT * FROM ({values}) AS v "
        f"WHERE EXISTS (SELECT 1 FROM {run} WHERE id = %s AND epoch = %s{lock}) "
        f"RETURNING (SELECT cancel_requested FROM {run} WHERE id = %s), "
        f"(SELECT value FROM {generation} WHERE id = 1)"
    )


def append(
    lease: Lease, first_sequence: int, items: Sequence[tuple[str, dict[str, Any]]]
) -> list[Ev]:
    """Insert inside the caller's transaction; raise Fenced if the epoch moved on."""
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    params: list[Any] = []
    events = []
    for offset, (kind, payload) in enumerate(items):
        sequence = first_sequence + offset
        params += [lease.thread_id, lease.run_id, sequence, kind, json.dumps(payload), now]
        events.append(Ev(sequence, kind, payload, lease.run_id))
    params += [lease.run_id, lease.epoch, lease.run_id]
    with connection.cursor() as cursor:
        cursor.execute(_sql(len(items)), params)
        returned = cursor.fetchall()
    if not returned:
        lease.lost = True
        raise Fenced("the lease was taken by another worker")
    lease.cancel_requested, lease.generation = bool(returned[0][0]), returned[0][1]
    return events


def check_fence(lease: Lease) -> None:
    """Inside a transaction that writes no event: hold the run row as `append` does."""
    if not Run.objects.select_for_update().filter(lease.fence).exists():
        lease.lost = True
        raise Fenced("the lease was taken by another worker")
