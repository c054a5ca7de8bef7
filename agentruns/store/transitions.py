"""Every change of `Run.status` and of a held lease, each a fenced or conditional update
whose row count is checked, with ONE set of "release the lease" columns. Claims
(queued/expired → running, CLU-2) run the store's claim statement on the database clock
and come back as a `Claim`; a running run's own endings and parkings go through the step
statement with a `RunUpdate` (store/rows.py) that frees the same columns, fenced by the
lease. Heartbeat renewals of many leases at once: `renew_many`."""

from __future__ import annotations

import itertools
import os
import socket
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.db.models.functions import Now

from agentruns.errors import Fenced
from agentruns.models import GateAudit, Run
from agentruns.store import store
from agentruns.store.records import Claim, ClaimRow, Lease, Signals
from agentruns.store.rows import release_columns

Status = Run.Status


class LostTransition(AssertionError):
    """A transition the caller's row lock guaranteed did not change exactly one row."""


def _move(condition: Q, status: str) -> bool:
    """To `status`, freeing the lease (a running run's own steps do so with a `RunUpdate`
    of the same columns, fenced by its lease)."""
    return Run.objects.filter(condition).update(status=status, **release_columns()) == 1


def _must(moved: bool, what: str) -> None:
    if not moved:
        raise LostTransition(f"run transition {what} changed no row")


def run_hand_back(lease: Lease) -> bool:
    """running → queued under this worker's epoch, spending no attempt (a graceful stop,
    overload). False if the lease was lost meanwhile."""
    return _move(lease.fence & Q(status=Status.RUNNING), Status.QUEUED)


def run_requeue_answered(run_id: int) -> None:
    """awaiting → queued once its ticket resolved (HITL-3, HITL-7); under the run lock."""
    _must(_move(Q(pk=run_id, status=Status.AWAITING), Status.QUEUED), "awaiting → queued")


def run_cancel_parked(run_id: int) -> None:
    """queued or awaiting → cancelled (HITL-11); under the run lock."""
    parked = Q(pk=run_id, status__in=[Status.QUEUED, Status.AWAITING])
    _must(_move(parked, Status.CANCELLED), "parked → cancelled")


def lease_extend(lease: Lease) -> bool:
    """Push the lease's expiry out on the database clock (CLU-2); False if it was lost."""
    expires = Now() + timedelta(seconds=lease.seconds)
    return Run.objects.filter(lease.fence).update(lease_expires_at=expires) == 1


def lease_lapse(lease: Lease) -> bool:
    """Let a running run's lease expire now, so the sweeper reclaims it at once (CLU-3)."""
    held = lease.fence & Q(status=Status.RUNNING)
    return Run.objects.filter(held).update(lease_expires_at=Now()) == 1


def lease_cancel_flag(lease: Lease) -> bool | None:
    """The run's cancel flag read under its row lock, which the cancel service also takes
    (HITL-11); None if the lease was lost. Call inside a transaction."""
    held = Run.objects.select_for_update().filter(lease.fence)
    return held.values_list("cancel_requested", flat=True).first()


def cancel_requester(run_id: int) -> str | None:
    """Who asked to cancel a running run (OPS-5); read once, when the loop honours it."""
    row = Run.objects.filter(pk=run_id).values_list("cancel_requested_by", flat=True).first()
    return row or None


def trace_context_of(run_id: int) -> dict[str, Any] | None:
    """OPS-7: where the run's trace stands (read once per drive, only while tracing)."""
    return Run.objects.filter(pk=run_id).values_list("trace_context", flat=True).first()


def trace_context_save(lease: Lease, data: dict[str, Any]) -> None:
    """OPS-7: kept for the next drive of the run; written under this worker's epoch only
    (a parked run keeps its epoch until its next claim)."""
    Run.objects.filter(pk=lease.run_id, epoch=lease.epoch).update(trace_context=data)


def audits_save(rows: list[dict[str, Any]]) -> None:
    """Audit rows that justify no send (CG-14's `egress.withheld` of a trace), in one
    statement; a send's own ride with its step (`RunContext.audit`)."""
    GateAudit.objects.bulk_create(GateAudit(**row) for row in rows)


_CLAIM_NUMBERS = itertools.count(1)


def claim_owner() -> str:
    """The owner a claim statement writes into the leases it takes: this process
    (host:pid, what the cluster's status groups by) and the statement's own number in it.
    The runs one statement took can be found by it alone, even when the statement's reply
    never came back (`claim_unanswered`)."""
    return f"{socket.gethostname()}:{os.getpid()}:{next(_CLAIM_NUMBERS)}"


def claim(run_id: int, owner: str | None = None) -> Claim | None:
    """Take the run if it is queued, or running under an expired lease (a crash reclaim,
    which spends an attempt: CLU-3). SKIP LOCKED: a run another worker is claiming right
    now is simply not ours."""
    owner = owner or claim_owner()
    seconds = settings.AGENTRUNS_LEASE_SECONDS
    row = store().claim(run_id, owner, seconds)
    return _claimed(run_id, owner, seconds, row) if row else None


def claim_queued(limit: int, owner: str | None = None) -> list[Claim]:
    """Claim up to `limit` queued runs, oldest first, in one statement: a worker with free
    threads takes a burst of runs without waiting for each run's own wake-up (which then
    finds its run taken and does nothing, CLU-1). PostgreSQL only; elsewhere wake-ups do
    all the claiming."""
    return _claim_batch(store().claim_queued, limit, owner)


def claim_expired(limit: int, owner: str | None = None) -> list[Claim]:
    """Claim up to `limit` running runs whose lease expired, longest expired first: crash
    reclaims, each spending an attempt (CLU-3). PostgreSQL only, like `claim_queued`."""
    return _claim_batch(store().claim_expired, limit, owner)


def claim_unanswered(owners: list[str], limit: int, owner: str | None = None) -> list[Claim]:
    """Claim up to `limit` runs still leased to claim statements whose reply never came
    (the connection dropped after they committed, so their claimer never drove what they
    took). No worker drove them and none crashed: taken again under a new epoch, they
    spend no attempt (CLU-3). PostgreSQL only, like `claim_queued`."""
    if not owners:
        return []
    return _claim_batch(partial(store().claim_unanswered, owners), limit, owner)


def _claim_batch(
    claim_rows: Callable[[int, str, float], list[tuple[int, ClaimRow]]],
    limit: int,
    owner: str | None,
) -> list[Claim]:
    if limit < 1:
        return []
    owner = owner or claim_owner()
    seconds = settings.AGENTRUNS_LEASE_SECONDS
    return [
        _claimed(run_id, owner, seconds, row) for run_id, row in claim_rows(limit, owner, seconds)
    ]


def _claimed(run_id: int, owner: str, seconds: float, row: ClaimRow) -> Claim:
    """`row` as the store's claim returns it: the run as it was, and the attempts the claim
    `spent` (one for a crash reclaim; the store decides, CLU-3)."""
    reclaimed = bool(row["spent"])
    forced = row["forced_snippet_ids"], row["forced_skill_ids"]
    return Claim(
        lease=Lease(
            run_id=run_id,
            thread_id=row["thread_id"],
            configuration_id=row["configuration_id"],
            epoch=row["epoch"] + 1,
            owner=owner,
            seconds=seconds,
        ),
        attempts=row["attempts"] + row["spent"],
        reclaimed=reclaimed,
        forced_snippet_ids=None if forced[0] is None else tuple(forced[0]),
        forced_skill_ids=None if forced[1] is None else tuple(forced[1]),
        composed=row["composed"],
        generation=row["generation"],
        signals=Signals(cancel=row["cancel_requested"]),
        log=row.get("log"),
    )


def renew_if_due(lease: Lease, signals: Signals) -> None:
    """An executor renews its own lease when no heartbeat did for a third of it."""
    if signals.renewal_due(lease.seconds):
        started = time.monotonic()
        if not lease_extend(lease):
            raise Fenced("the lease was taken by another worker")
        signals.renewed(started)


def renew_many(claims: list[Claim]) -> None:
    """The process heartbeat (PERF-6): renew every lease this process holds in ONE
    statement on the database clock. A lease whose row no longer carries its epoch (or is
    no longer running) is marked lost; its executor stops at the next boundary. The cancel
    flag comes back with the renewal (HITL-11), as it does with every fenced append."""
    if not claims:
        return
    started = time.monotonic()
    renewed = store().renew_many([c.lease for c in claims], settings.AGENTRUNS_LEASE_SECONDS)
    for claim in claims:
        if claim.lease.run_id not in renewed:
            claim.signals.lose()
            continue
        claim.signals.renewed(started)
        if renewed[claim.lease.run_id]:
            claim.signals.request_cancel()
