"""CLU-2: claiming a run with a lease on the database clock, renewing it, fencing by epoch."""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from agentruns.errors import Fenced
from agentruns.models import CatalogGeneration, Run


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
        reclaimed = row["status"] == Run.Status.RUNNING
        Run.objects.filter(pk=run_id).update(
            status=Run.Status.RUNNING,
            epoch=F("epoch") + 1,
            lease_owner=owner,
            lease_expires_at=Now() + timedelta(seconds=seconds),
            attempts=F("attempts") + int(reclaimed),
        )
        generation = CatalogGeneration.objects.values_list("value", flat=True).get(pk=1)
    return Lease(
        run_id=run_id,
        thread_id=row["thread_id"],
        configuration_id=row["configuration_id"],
        epoch=row["epoch"] + 1,
        owner=owner,
        generation=generation,
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
