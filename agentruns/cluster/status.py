"""What an operator watches: the queue, runs by status, leases, and runs that look stuck.
One snapshot function feeds `manage.py cluster_status` (table or `--json`) and the admin
page (agentruns.cluster.admin)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, Max, Min, Q
from django_q.models import Failure, OrmQ

from agentruns.cluster.sweeper import live_wake_rows, lost_candidates, q_timeouts
from agentruns.models import Run, Ticket, ToolInvocation, WebhookDelivery
from agentruns.services.usage import daily_usage
from agentruns.store import store
from agentruns.store.base import lease_expired

# A running run that wrote nothing for this long is shown as possibly stuck (a provider
# or tool that hangs; its lease is still renewed, so nobody else will take it).
SILENT_SECONDS = 600.0
LIST_LIMIT = 20


@dataclass
class LeaseInfo:
    run_id: int
    owner: str
    epoch: int
    attempts: int
    renewed_seconds_ago: float | None
    expires_in_seconds: float | None


@dataclass
class Snapshot:
    database_now: str
    database: str
    lease_seconds: float
    q_workers: int
    executor_threads: int
    db_pool_max: int
    queue_waiting: int
    queue_taken: int
    # Taken by a cluster longer ago than q2's timeout: that cluster died or is wedged.
    queue_stalled: int
    queue_oldest_waiting_seconds: float | None
    runs_by_status: dict[str, int]
    running: int
    owners: dict[str, int]
    oldest_lease: LeaseInfo | None
    oldest_queued_seconds: float | None
    expired_leases: list[int] = field(default_factory=list)
    lost_wakeups: list[int] = field(default_factory=list)
    silent_running: list[int] = field(default_factory=list)
    overdue_tickets: int = 0
    retried_runs: int = 0
    failed_tasks_last_hour: int = 0
    db_connections: int | None = None
    # What an operator asks next: who waits longest, what is uncertain, what it cost today.
    awaiting_longest: list[tuple[int, float]] = field(default_factory=list)
    uncertain_calls: list[int] = field(default_factory=list)
    spend_today: dict[str, dict[str, Any]] = field(default_factory=dict)
    webhooks_failed: int = 0
    webhooks_retrying: int = 0

    @property
    def stuck(self) -> int:
        # A stalled queue row's run is already counted among the lost wake-ups.
        return len(self.expired_leases) + len(self.lost_wakeups) + len(self.silent_running)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stuck"] = self.stuck
        return data


def _seconds(delta: timedelta | None) -> float | None:
    return None if delta is None else round(delta.total_seconds(), 3)


def snapshot() -> Snapshot:
    now = store().database_now()
    q_cluster: dict[str, Any] = settings.Q_CLUSTER
    lease_seconds = float(settings.AGENTRUNS_LEASE_SECONDS)
    timeout, retry = q_timeouts()
    stale_before = now + timedelta(seconds=retry - timeout)
    queue = OrmQ.objects.aggregate(
        waiting=Count("id", filter=Q(lock__lte=now) | Q(lock__isnull=True)),
        taken=Count("id", filter=Q(lock__gt=now)),
        stalled=Count("id", filter=Q(lock__gt=now, lock__lt=stale_before)),
        oldest=Min("lock", filter=Q(lock__lte=now)),
    )
    by_status = dict(
        Run.objects.order_by()
        .values_list("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    running = Run.objects.filter(status=Run.Status.RUNNING)
    owners: dict[str, int] = {}
    for owner, n in running.order_by().values_list("lease_owner").annotate(n=Count("id")):
        process = ":".join(owner.split(":")[:2]) if owner else "(none)"
        owners[process] = owners.get(process, 0) + n
    oldest = running.order_by("lease_expires_at").first()
    oldest_lease = None
    if oldest is not None:
        expires = oldest.lease_expires_at
        oldest_lease = LeaseInfo(
            run_id=oldest.pk,
            owner=oldest.lease_owner,
            epoch=oldest.epoch,
            attempts=oldest.attempts,
            renewed_seconds_ago=_seconds(now - (expires - timedelta(seconds=lease_seconds)))
            if expires
            else None,
            expires_in_seconds=_seconds(expires - now) if expires else None,
        )
    oldest_queued = Run.objects.filter(status=Run.Status.QUEUED).aggregate(
        t=Min("wake_enqueued_at")
    )["t"]
    expired = list(
        Run.objects.filter(lease_expired())
        .order_by("lease_expires_at")
        .values_list("pk", flat=True)[:LIST_LIMIT]
    )
    lost: list[int] = []
    candidates = list(
        Run.objects.filter(lost_candidates()).values_list("pk", "wake_queue_id")[: LIST_LIMIT * 50]
    )
    if candidates:
        live = live_wake_rows()
        lost = [pk for pk, row in candidates if row not in live][:LIST_LIMIT]
    silent = list(
        running.annotate(last=Max("event__created_at"))
        .filter(last__lt=now - timedelta(seconds=SILENT_SECONDS))
        .values_list("pk", flat=True)[:LIST_LIMIT]
    )
    return Snapshot(
        database_now=now.isoformat(),
        database=str(connection.settings_dict.get("NAME")),
        lease_seconds=lease_seconds,
        q_workers=int(q_cluster.get("workers") or 0),
        executor_threads=int(settings.AGENTRUNS_EXECUTOR_THREADS),
        db_pool_max=int(settings.AGENTRUNS_DB_POOL_MAX),
        queue_waiting=queue["waiting"],
        queue_taken=queue["taken"],
        queue_stalled=queue["stalled"],
        queue_oldest_waiting_seconds=_seconds(now - queue["oldest"]) if queue["oldest"] else None,
        runs_by_status={status: by_status.get(status, 0) for status in Run.Status.values},
        running=by_status.get(Run.Status.RUNNING, 0),
        owners=dict(sorted(owners.items())),
        oldest_lease=oldest_lease,
        oldest_queued_seconds=_seconds(now - oldest_queued) if oldest_queued else None,
        expired_leases=expired,
        lost_wakeups=lost,
        silent_running=silent,
        overdue_tickets=Ticket.objects.filter(
            status=Ticket.Status.ACTIVE, deadline__lt=now
        ).count(),
        retried_runs=Run.objects.exclude(status__in=Run.TERMINAL).filter(attempts__gt=0).count(),
        failed_tasks_last_hour=Failure.objects.filter(
            stopped__gte=now - timedelta(hours=1)
        ).count(),
        db_connections=store().client_connections(),
        **_operations(now),
    )


def _operations(now: datetime) -> dict[str, Any]:
    waiting = (
        Ticket.objects.filter(status=Ticket.Status.ACTIVE, run__status=Run.Status.AWAITING)
        .order_by("created_at")
        .values_list("run_id", "created_at")[:5]
    )
    uncertain = (
        ToolInvocation.objects.filter(uncertain=True)
        .order_by("-id")
        .values_list("run_id", flat=True)[:LIST_LIMIT]
    )
    deliveries = WebhookDelivery.objects.aggregate(
        failed=Count("id", filter=Q(status=WebhookDelivery.Status.FAILED)),
        retrying=Count("id", filter=Q(status=WebhookDelivery.Status.PENDING, attempts__gt=0)),
    )
    today = now.astimezone(UTC).date()
    return {
        "awaiting_longest": [(pk, _seconds(now - opened) or 0.0) for pk, opened in waiting],
        "uncertain_calls": list(dict.fromkeys(uncertain)),
        "spend_today": {
            row.configuration: row.usage.as_dict() for row in daily_usage(start=today, end=today)
        },
        "webhooks_failed": deliveries["failed"],
        "webhooks_retrying": deliveries["retrying"],
    }


def table(snap: Snapshot) -> list[tuple[str, str]]:
    """The snapshot as (label, value) rows for people."""

    def fmt(seconds: float | None) -> str:
        return "-" if seconds is None else f"{seconds:.1f}s"

    lease = snap.oldest_lease
    lease_text = (
        f"run {lease.run_id} on {lease.owner or '?'} (epoch {lease.epoch}, attempts "
        f"{lease.attempts}): renewed {fmt(lease.renewed_seconds_ago)} ago, expires in "
        f"{fmt(lease.expires_in_seconds)}"
        if lease
        else "-"
    )
    rows = [
        ("database", f"{snap.database} (now {snap.database_now})"),
        (
            "configuration",
            f"{snap.q_workers} q2 workers x {snap.executor_threads} threads, pool "
            f"{snap.db_pool_max}, lease {snap.lease_seconds:g}s",
        ),
        (
            "queue",
            f"{snap.queue_waiting} waiting (oldest {fmt(snap.queue_oldest_waiting_seconds)}), "
            f"{snap.queue_taken} taken ({snap.queue_stalled} for longer than q2's timeout)",
        ),
        ("runs", ", ".join(f"{k} {v}" for k, v in snap.runs_by_status.items())),
        (
            "running on",
            ", ".join(f"{k}: {v}" for k, v in snap.owners.items()) or "-",
        ),
        ("oldest lease", lease_text),
        ("oldest queued", fmt(snap.oldest_queued_seconds)),
        ("expired leases", _ids(snap.expired_leases)),
        ("lost wake-ups", _ids(snap.lost_wakeups)),
        (f"running, silent > {SILENT_SECONDS:.0f}s", _ids(snap.silent_running)),
        ("overdue tickets", str(snap.overdue_tickets)),
        ("live runs reclaimed", str(snap.retried_runs)),
        ("failed tasks (1 h)", str(snap.failed_tasks_last_hour)),
        ("db connections", "-" if snap.db_connections is None else str(snap.db_connections)),
        ("stuck", str(snap.stuck)),
        (
            "awaiting longest",
            ", ".join(f"run {pk} ({fmt(s)})" for pk, s in snap.awaiting_longest) or "-",
        ),
        ("runs with uncertain calls", _ids(snap.uncertain_calls)),
        (
            "spend today (UTC)",
            "; ".join(
                f"{slug}: {u['input_tokens']} in + {u['output_tokens']} out = "
                f"{u['cost']} {u['currency']}"
                for slug, u in snap.spend_today.items()
            )
            or "-",
        ),
        (
            "webhook deliveries",
            f"{snap.webhooks_failed} gave up, {snap.webhooks_retrying} retrying",
        ),
    ]
    return rows


def _ids(ids: list[int]) -> str:
    if not ids:
        return "0"
    more = "…" if len(ids) >= LIST_LIMIT else ""
    return f"{len(ids)}{'+' if more else ''}: " + ", ".join(map(str, ids)) + more
