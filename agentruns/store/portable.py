"""The store anywhere but PostgreSQL: what the embedded SQLite demo (`make run`, web and a
real cluster on one machine) needs, as ORM statements inside a transaction. The suite runs
on PostgreSQL; only tests/loop/test_smoke.py and tests/hitl/test_smoke.py run this. No
batch claims: wake-ups do all the claiming here."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone

from agentruns.errors import Fenced
from agentruns.models import (
    CatalogGeneration,
    Checkpoint,
    DailyUsage,
    Event,
    GateAudit,
    Run,
    Ticket,
    ToolInvocation,
    Webhook,
    WebhookDelivery,
)
from agentruns.store.base import SystemStore, claimable
from agentruns.store.log import LOG_FIELDS
from agentruns.store.records import (
    CLAIM_FIELDS,
    ClaimRow,
    Lease,
    Log,
    LogRow,
    Step,
    Written,
    checkpoint_row,
    event_row,
)


def _generation() -> int:
    return CatalogGeneration.objects.values_list("value", flat=True).get(pk=1)


def _lost() -> NoReturn:
    raise Fenced("the lease was taken by another worker")


class PortableStore(SystemStore):
    skip_locked = False

    def write_step(self, lease: Lease, step: Step, *, durable: bool, count_today: bool) -> Written:
        with transaction.atomic():
            fenced = Run.objects.select_for_update().filter(lease.fence)
            row = fenced.values_list("cancel_requested", flat=True).first()
            held = Event.objects.filter(thread_id=lease.thread_id, sequence=step.after)
            if row is None or (step.after and not held.exists()):  # see Step.after
                _lost()
            now = timezone.now()
            events = Event.objects.bulk_create(
                Event(**event_row(lease, e, now)) for e in step.events
            )
            self.queue_deliveries(events)  # OPS-4's outbox, then OPS-1's counter
            spent = DailyUsage.usage_of(step.events)
            used_today = None
            if any(spent):
                DailyUsage.add(lease.configuration_id, *spent)
                if count_today:
                    used_today = (DailyUsage.today(), DailyUsage.used_today(lease.configuration_id))
            Checkpoint.objects.bulk_create(
                Checkpoint(**checkpoint_row(lease, cp, now)) for cp in step.checkpoints
            )
            changed = step.rows
            created = ToolInvocation.objects.bulk_create(
                ToolInvocation(**row.row(), created_at=now) for row in changed.new_invocations
            )
            for ticket in changed.new_tickets:
                Ticket.objects.create(**ticket.row())
            GateAudit.objects.bulk_create(GateAudit(**row, created_at=now) for row in step.audits)
            for change in changed.invocation_updates:
                ToolInvocation.objects.filter(pk=change.pk).update(**change.changes())
            run_update = changed.run_update
            fenced = Run.objects.filter(lease.fence)
            if run_update is not None and not fenced.update(**run_update.columns()):
                _lost()
            return Written(
                invocations={invocation.call_id: invocation.pk for invocation in created},
                cancel_requested=bool(row),
                generation=_generation(),
                used_today=used_today,
            )

    def read_log(self, thread_id: int, run_id: int) -> Log:
        thread = Event.objects.filter(thread_id=thread_id).order_by("sequence")
        events: list[LogRow] = list(thread.values_list(*LOG_FIELDS))
        latest = Checkpoint.objects.filter(run_id=run_id).order_by("-id")
        state: dict[str, Any] | None = latest.values_list("state", flat=True).first()
        return events, state

    def claim(self, run_id: int, owner: str, seconds: float) -> ClaimRow | None:
        with transaction.atomic():
            row = (
                Run.objects.select_for_update(skip_locked=True)
                .filter(claimable(), pk=run_id)
                .values(*CLAIM_FIELDS, "composed_at")
                .first()
            )
            if row is None:
                return None
            spent = int(row["status"] == Run.Status.RUNNING)  # a crash reclaim (CLU-3)
            Run.objects.filter(pk=run_id).update(
                status=Run.Status.RUNNING,
                epoch=F("epoch") + 1,
                lease_owner=owner,
                lease_expires_at=Now() + timedelta(seconds=seconds),
                attempts=F("attempts") + spent,
            )
            composed = row.pop("composed_at") is not None
            return {**row, "composed": composed, "generation": _generation(), "spent": spent}

    def claim_queued(self, limit: int, owner: str, seconds: float) -> list[tuple[int, ClaimRow]]:
        return []

    def renew_many(self, leases: list[Lease], seconds: float) -> dict[int, bool]:
        renewed = {}
        for lease in leases:
            rows = Run.objects.filter(lease.fence, status=Run.Status.RUNNING)
            if rows.update(lease_expires_at=Now() + timedelta(seconds=seconds)):
                renewed[lease.run_id] = bool(
                    rows.values_list("cancel_requested", flat=True).first()
                )
        return renewed

    def claim_expired(self, limit: int, owner: str, seconds: float) -> list[tuple[int, ClaimRow]]:
        return []

    def claim_unanswered(
        self, owners: list[str], limit: int, owner: str, seconds: float
    ) -> list[tuple[int, ClaimRow]]:
        return []

    def queue_deliveries(self, events: Sequence[Event]) -> None:
        hooks = Webhook.objects.filter(active=True)
        WebhookDelivery.objects.bulk_create(WebhookDelivery.rows_for(events, hooks))

    def dequeue_tasks(self, list_key: str, limit: int, lock_secs: float) -> list[tuple[int, str]]:
        raise NotImplementedError("without SKIP LOCKED the ORM broker dequeues by itself")

    def database_now(self) -> datetime:
        return timezone.now()

    def client_connections(self) -> int | None:
        return None

    def make_durable(self) -> None:
        """Every SQLite commit here waits for its write; none is deferred."""
