"""Every change of `Run.status` and of a held lease, each a fenced or conditional update
whose row count is checked, with ONE set of "release the lease" columns. Claims
(queued/expired → running) are the store's claim statement; a running run's own endings
and parkings go through the step statement with `released(...)` as its run update, fenced
by the lease. Heartbeat renewals of many leases at once: `SystemStore.renew_many`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from agentruns.models import Run
from agentruns.store.records import Lease

Status = Run.Status


class LostTransition(AssertionError):
    """A transition the caller's row lock guaranteed did not change exactly one row."""


def release_columns() -> dict[str, Any]:
    """The run holds no worker and no lease (parked, handed back or ended)."""
    return {"lease_owner": "", "lease_expires_at": None, "updated_at": timezone.now()}


def released(status: str, **changes: Any) -> dict[str, Any]:
    """A run update that moves the run to `status` and frees its lease."""
    return {**changes, "status": status, **release_columns()}


def _move(condition: Q, status: str, **changes: Any) -> bool:
    return Run.objects.filter(condition).update(**released(status, **changes)) == 1


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
