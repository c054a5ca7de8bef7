"""What operating and integrating needs (OPS-1..OPS-5): the day's token counters, webhooks
and their outbox, and the permission to export the audit."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, date, datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from agentruns import events as ev
from agentruns.classes import ZONE_CHOICES, Zone
from agentruns.models.catalog import Configuration, GateAudit
from agentruns.outbound import url_problem

USAGE_EVENTS = (ev.ASSISTANT, ev.COMPACTION)
USAGE_RECORDS = ev.AssistantMessage | ev.Compaction


class DailyUsage(models.Model):
    """OPS-1, OPS-2: tokens a configuration's runs used on one UTC day, in SHARDS rows. The
    loop upserts a run's shard in the statement that writes each model turn, so the daily
    limit is one indexed read of at most SHARDS rows and per-day spend never scans the log.
    Concurrent runs of one configuration would otherwise all queue on one row's lock, each
    holding it to its commit (PERF-6: a 1000-run batch spent most of its time there)."""

    SHARDS = 32

    # daily_usage_once leads with the configuration: a second index on it would only cost.
    configuration = models.ForeignKey(
        Configuration, on_delete=models.CASCADE, related_name="daily_usage", db_index=False
    )
    day = models.DateField()
    shard = models.PositiveSmallIntegerField(
        default=0, help_text="The day's tokens are the sum over its shards (run id modulo 32)."
    )
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["-day", "configuration", "shard"]
        constraints = [
            models.UniqueConstraint(
                fields=["configuration", "day", "shard"], name="daily_usage_once"
            )
        ]
        verbose_name_plural = "daily usage"

    def __str__(self) -> str:
        return f"{self.configuration_id} on {self.day} ({self.shard})"

    @staticmethod
    def today() -> date:
        return datetime.now(UTC).date()

    @classmethod
    def used_today(cls, configuration_id: int) -> int:
        """OPS-2's one read: an index range on (configuration, day), its shards summed."""
        total = cls.objects.filter(configuration_id=configuration_id, day=cls.today()).aggregate(
            used=models.Sum(models.F("input_tokens") + models.F("output_tokens"))
        )["used"]
        return int(total or 0)

    @classmethod
    def at_limit(
        cls, configuration_id: int, limit: int | None, *, seen: tuple[date, int] | None = None
    ) -> bool:
        """No limit costs nothing; a limit is reached once the day's tokens meet it. `seen`
        is today's total as a step statement returned it, which spares the read."""
        if limit is None:
            return False
        if seen is not None and seen[0] == cls.today():
            return seen[1] >= limit
        return cls.used_today(configuration_id) >= limit

    @classmethod
    def add(cls, configuration_id: int, input_tokens: int, output_tokens: int) -> None:
        """The portable upsert (into shard 0: SQLite writes one transaction at a time); on
        PostgreSQL the loop upserts inside its step (`store/ops_sql.py`)."""
        if not (input_tokens or output_tokens):
            return
        day = cls.today()
        if not cls.objects.filter(configuration_id=configuration_id, day=day, shard=0).update(
            input_tokens=models.F("input_tokens") + input_tokens,
            output_tokens=models.F("output_tokens") + output_tokens,
        ):
            cls.objects.get_or_create(configuration_id=configuration_id, day=day, shard=0)
            cls.add(configuration_id, input_tokens, output_tokens)

    @staticmethod
    def usage_of(events: Iterable[Any]) -> tuple[int, int]:
        """(input, output) tokens the events record: model turns and compaction summaries."""
        spent_in = spent_out = 0
        for event in events:
            if event.type in USAGE_EVENTS:
                data = event.data  # the entry's record, kept once parsed (LogEntry)
                usage = (data.usage if isinstance(data, USAGE_RECORDS) else None) or {}
                spent_in += usage.get("input_tokens", 0)
                spent_out += usage.get("output_tokens", 0)
        return spent_in, spent_out


class Webhook(models.Model):
    """OPS-4: where matching events are delivered. An empty `events` list means every type."""

    url = models.URLField(max_length=1000)
    events = models.JSONField(
        default=list, blank=True, help_text='Event types, e.g. ["run.completed"]; empty: all.'
    )
    secret = models.CharField(
        max_length=200, help_text="Signs every delivery (HMAC-SHA256); never shown again."
    )
    description = models.CharField(max_length=200, blank=True)
    active = models.BooleanField(default=True)
    # GOV-1: the number of the version in force; the creation is 1 (services.changes).
    version = models.PositiveIntegerField(default=1, editable=False)
    # CG-14: where the receiver sits, as a provider's zone; its ceiling bounds the content
    # a delivery carries (above it, a field holds "withheld: <class>").
    trust_zone = models.CharField(
        max_length=32,
        choices=ZONE_CHOICES,
        default=Zone.EXTERNAL_GLOBAL.label,
        blank=True,
        help_text="Where the receiver sits (empty: external global); content above this "
        "zone's ceiling is withheld.",
    )
    # SEC-15: the owner. A webhook delivers only events of runs its owner may see; one
    # whose owner is gone or deactivated delivers nothing.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        verbose_name="owner",
        help_text="Only events of runs this user may see are delivered.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.url

    def clean(self) -> None:
        """SEC-9 on save (the admin's form runs it; the API's serializer too)."""
        problem = url_problem(self.url)
        if problem:
            raise ValidationError({"url": problem})

    # The matching rule; its SQL twin is `store/ops_sql.py`'s WEBHOOK_MATCH.
    def wants(self, event_type: str) -> bool:
        return self.active and (not self.events or event_type in self.events)


class WebhookDelivery(models.Model):
    """One event for one webhook: the outbox row, written in the event's transaction."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"  # gave up after AGENTRUNS_WEBHOOK_MAX_ATTEMPTS
        # SEC-15: of a run the webhook's owner may not see (or of a webhook without an
        # active owner): recorded, never sent.
        WITHHELD = "withheld"

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    delivery_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    event_type = models.CharField(max_length=40)
    run_id = models.BigIntegerField(null=True, blank=True)
    thread_id = models.BigIntegerField()
    sequence = models.PositiveIntegerField()
    payload = models.JSONField(default=dict)
    event_created_at = models.DateTimeField()
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # CG-14: what the sender held back of the payload ({field, class}), written with the
    # first attempt; the payload itself stays whole here, like the event it copies.
    withheld = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "webhook deliveries"
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=models.Q(status="pending"),
                name="webhook_delivery_due",
            )
        ]

    def __str__(self) -> str:
        return f"{self.event_type} #{self.sequence} → webhook {self.webhook_id} ({self.status})"

    @classmethod
    def rows_for(cls, events: Iterable[Any], webhooks: Iterable[Webhook]) -> list[WebhookDelivery]:
        """The portable twin of `store/ops_sql.py`'s `delivery_insert`: unsaved rows for
        the matching pairs."""
        hooks = list(webhooks)
        return [
            cls(
                webhook=hook,
                event_type=event.type,
                run_id=event.run_id,
                thread_id=event.thread_id,
                sequence=event.sequence,
                payload=event.payload,
                event_created_at=event.created_at,
            )
            for event in events
            for hook in hooks
            if hook.wants(event.type)
        ]


class WebhookAttempt(models.Model):
    delivery = models.ForeignKey(
        WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log"
    )
    at = models.DateTimeField(default=timezone.now)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"delivery {self.delivery_id}: {self.status_code or self.error[:40]}"


class AuditRecord(GateAudit):
    """OPS-5: the audit export's home in the admin, and its permission."""

    class Meta:
        proxy = True
        verbose_name = "audit record"
        permissions = [("view_audit", "Can export the audit (gate decisions and approvals)")]
