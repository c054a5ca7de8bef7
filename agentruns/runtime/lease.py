"""CLU-2: claiming a run with a lease on the database clock, renewing it, fencing by epoch."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from agentruns.errors import Fenced
from agentruns.models import CatalogGeneration, Run
from agentruns.runtime.dbconn import fast_commit


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


@dataclass
class Lease:
    run_id: int
    thread_id: int
    configuration_id: int
    epoch: int
    owner: str
    generation: int
    reclaimed: bool
    attempts: int
    created_by_id: int | None
    forced_snippet_ids: list[int] | None
    forced_skill_ids: list[int] | None
    composed: bool
    seconds: float = field(default_factory=lambda: settings.AGENTRUNS_LEASE_SECONDS)
    renewed_at: float = field(default_factory=time.monotonic)
    cancel_requested: bool = False
    # Set by the process heartbeat when a renewal found the epoch moved on.
    lost: bool = False
    # Set by the driver when its process is shutting down: release at the next boundary.
    stop_requested: bool = False

    @property
    def fence(self) -> Q:
        return Q(pk=self.run_id, epoch=self.epoch)


CLAIM_FIELDS = (
    "status",
    "thread_id",
    "configuration_id",
    "epoch",
    "attempts",
    "created_by_id",
    "forced_snippet_ids",
    "forced_skill_ids",
    "cancel_requested",
)


def claim(run_id: int, owner: str | None = None) -> Lease | None:
    """Take the run if it is queued, or running under an expired lease (a crash reclaim,
    which spends an attempt: CLU-3). SKIP LOCKED: a run another worker is claiming right
    now is simply not ours."""
    owner = owner or worker_name()
    seconds = settings.AGENTRUNS_LEASE_SECONDS
    if connection.vendor == "postgresql":
        row = _claim_statement(run_id, owner, seconds)
        return _lease(run_id, owner, seconds, row) if row else None
    claimable = Q(status=Run.Status.QUEUED) | Q(
        Q(lease_expires_at__lt=Now()) | Q(lease_expires_at__isnull=True),
        status=Run.Status.RUNNING,
    )
    with transaction.atomic():
        row = (
            Run.objects.select_for_update(skip_locked=True)
            .filter(claimable, pk=run_id)
            .values(*CLAIM_FIELDS, "composed_at")
            .first()
        )
        if row is None:
            return None
        Run.objects.filter(pk=run_id).update(
            status=Run.Status.RUNNING,
            epoch=F("epoch") + 1,
            lease_owner=owner,
            lease_expires_at=Now() + timedelta(seconds=seconds),
            attempts=F("attempts") + int(row["status"] == Run.Status.RUNNING),
        )
        generation = CatalogGeneration.objects.values_list("value", flat=True).get(pk=1)
    return _lease(run_id, owner, seconds, {**row, "generation": generation})


def _claim_statement(run_id: int, owner: str, seconds: float) -> dict | None:
    """The claim as one statement on the database clock. Losing it to a database crash
    only makes the run claimable again, so its commit need not wait for the WAL flush."""
    rows = _claim_rows(
        "id = %s AND (status = 'queued' OR (status = 'running' AND "
        "(lease_expires_at IS NULL OR lease_expires_at < now())))",
        [run_id],
        owner,
        seconds,
    )
    return rows[0][1] if rows else None


def claim_queued(limit: int, owner: str | None = None) -> list[Lease]:
    """Claim up to `limit` queued runs, oldest first, in one statement: a worker with free
    threads takes a burst of runs without waiting for each run's own wake-up (which then
    finds its run taken and does nothing, CLU-1). PostgreSQL only; elsewhere wake-ups do
    all the claiming."""
    if limit < 1 or connection.vendor != "postgresql":
        return []
    owner = owner or worker_name()
    seconds = settings.AGENTRUNS_LEASE_SECONDS
    rows = _claim_rows("status = 'queued' ORDER BY id LIMIT %s", [limit], owner, seconds)
    return [_lease(run_id, owner, seconds, row) for run_id, row in rows]


def _claim_rows(
    where: str, params: list[Any], owner: str, seconds: float
) -> list[tuple[int, dict]]:
    table = Run._meta.db_table
    columns = ", ".join(f"old.{c}" for c in CLAIM_FIELDS)
    sql = (
        f"UPDATE {table} AS r SET status = 'running', epoch = r.epoch + 1, "
        "lease_owner = %s, lease_expires_at = now() + %s * interval '1 second', "
        "attempts = r.attempts + (CASE WHEN r.status = 'running' THEN 1 ELSE 0 END) "
        f"FROM (SELECT {', '.join(CLAIM_FIELDS)}, composed_at, id FROM {table} "
        f"WHERE {where} FOR UPDATE SKIP LOCKED) "
        f"AS old WHERE r.id = old.id RETURNING old.id, {columns}, old.composed_at, "
        f"(SELECT value FROM {CatalogGeneration._meta.db_table} WHERE id = 1)"
        + (", set_config('synchronous_commit', 'off', true)" if fast_commit(False) else "")
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [owner, seconds, *params])
        found = cursor.fetchall()
    names = [*CLAIM_FIELDS, "composed_at", "generation"]
    claimed = []
    for run_id, *values in found:
        row = dict(zip(names, values[: len(names)], strict=True))
        for key in ("forced_snippet_ids", "forced_skill_ids"):
            if isinstance(row[key], str):
                row[key] = json.loads(row[key])
        claimed.append((run_id, row))
    return claimed


def _lease(run_id: int, owner: str, seconds: float, row: dict) -> Lease:
    reclaimed = row["status"] == Run.Status.RUNNING
    return Lease(
        run_id=run_id,
        thread_id=row["thread_id"],
        configuration_id=row["configuration_id"],
        epoch=row["epoch"] + 1,
        owner=owner,
        generation=row["generation"],
        reclaimed=reclaimed,
        attempts=row["attempts"] + int(reclaimed),
        created_by_id=row["created_by_id"],
        forced_snippet_ids=row["forced_snippet_ids"],
        forced_skill_ids=row["forced_skill_ids"],
        composed=row["composed_at"] is not None,
        seconds=seconds,
        cancel_requested=row["cancel_requested"],
    )


def renew(lease: Lease) -> None:
    updated = Run.objects.filter(lease.fence).update(
        lease_expires_at=Now() + timedelta(seconds=lease.seconds)
    )
    if not updated:
        lease.lost = True
        raise Fenced("the lease was taken by another worker")
    lease.renewed_at = time.monotonic()


def renew_if_due(lease: Lease) -> None:
    """Renew at about a third of the lease, so two missed renewals still leave slack."""
    if time.monotonic() - lease.renewed_at >= lease.seconds / 3:
        renew(lease)


def renew_many(leases: list[Lease]) -> None:
    """The process heartbeat (PERF-6): renew every lease this process holds in ONE
    statement on the database clock. A lease whose row no longer carries its epoch (or is
    no longer running) is marked lost; its executor stops at the next boundary. The cancel
    flag comes back with the renewal (HITL-11), as it does with every fenced append."""
    if not leases:
        return
    seconds = settings.AGENTRUNS_LEASE_SECONDS
    started = time.monotonic()
    table = Run._meta.db_table
    if connection.vendor == "postgresql":
        sql = (
            f"UPDATE {table} AS r SET lease_expires_at = now() + %s * interval '1 second' "
            "FROM (SELECT unnest(%s::bigint[]) AS id, unnest(%s::bigint[]) AS epoch) AS held "
            "WHERE r.id = held.id AND r.epoch = held.epoch AND r.status = 'running' "
            "RETURNING r.id, r.cancel_requested"
        )
        params: list[Any] = [
            seconds,
            [lease.run_id for lease in leases],
            [lease.epoch for lease in leases],
        ]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            renewed = dict(cursor.fetchall())
    else:
        renewed = {}
        for lease in leases:
            rows = Run.objects.filter(lease.fence, status=Run.Status.RUNNING)
            if rows.update(lease_expires_at=Now() + timedelta(seconds=seconds)):
                renewed[lease.run_id] = rows.values_list("cancel_requested", flat=True).first()
    for lease in leases:
        if lease.run_id in renewed:
            lease.renewed_at = started
            lease.cancel_requested = lease.cancel_requested or bool(renewed[lease.run_id])
        else:
            lease.lost = True


def abandon(lease: Lease) -> bool:
    """A worker that cannot go on with a run (an unexpected error) lets its lease lapse now
    instead of at expiry, so the sweeper reclaims it at once; like a crash, that reclaim
    spends an attempt (CLU-3), which bounds a run that keeps failing."""
    return bool(
        Run.objects.filter(lease.fence, status=Run.Status.RUNNING).update(lease_expires_at=Now())
    )
