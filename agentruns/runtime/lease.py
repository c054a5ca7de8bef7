"""CLU-2: claiming a run with a lease on the database clock, renewing it, fencing by epoch."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable

from django.conf import settings

from agentruns.errors import Fenced
from agentruns.models import Run
from agentruns.store import store
from agentruns.store.records import Lease
from agentruns.store.transitions import lease_extend, lease_lapse


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def claim(run_id: int, owner: str | None = None) -> Lease | None:
    """Take the run if it is queued, or running under an expired lease (a crash reclaim,
    which spends an attempt: CLU-3). SKIP LOCKED: a run another worker is claiming right
    now is simply not ours."""
    owner = owner or worker_name()
    seconds = settings.AGENTRUNS_LEASE_SECONDS
    row = store().claim(run_id, owner, seconds)
    return _lease(run_id, owner, seconds, row) if row else None


def claim_queued(limit: int, owner: str | None = None) -> list[Lease]:
    """Claim up to `limit` queued runs, oldest first, in one statement: a worker with free
    threads takes a burst of runs without waiting for each run's own wake-up (which then
    finds its run taken and does nothing, CLU-1). PostgreSQL only; elsewhere wake-ups do
    all the claiming."""
    return _claim_batch(store().claim_queued, limit, owner)


def claim_expired(limit: int, owner: str | None = None) -> list[Lease]:
    """Claim up to `limit` running runs whose lease expired, longest expired first: crash
    reclaims, each spending an attempt (CLU-3). PostgreSQL only, like `claim_queued`."""
    return _claim_batch(store().claim_expired, limit, owner)


def _claim_batch(
    claim_rows: Callable[[int, str, float], list[tuple[int, dict]]],
    limit: int,
    owner: str | None,
) -> list[Lease]:
    if limit < 1:
        return []
    owner = owner or worker_name()
    seconds = settings.AGENTRUNS_LEASE_SECONDS
    return [
        _lease(run_id, owner, seconds, row) for run_id, row in claim_rows(limit, owner, seconds)
    ]


def claim_runnable(limit: int, owner: str | None = None) -> list[Lease]:
    """What a worker with `limit` free threads takes straight from the database, with no
    wake-up (CLU-1): queued runs first, then expired leases."""
    leases = claim_queued(limit, owner)
    return leases + claim_expired(limit - len(leases), owner)


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
        forced_snippet_ids=row["forced_snippet_ids"],
        forced_skill_ids=row["forced_skill_ids"],
        composed=row["composed_at"] is not None,
        seconds=seconds,
        cancel_requested=row["cancel_requested"],
    )


def renew(lease: Lease) -> None:
    if not lease_extend(lease):
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
    started = time.monotonic()
    renewed = store().renew_many(leases, settings.AGENTRUNS_LEASE_SECONDS)
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
    return lease_lapse(lease)
