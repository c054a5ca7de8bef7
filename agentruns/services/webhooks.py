"""Webhooks (OPS-4): the outbox, and the sender the outbox process runs.

Queueing is the outbox pattern, like the wake-ups: a delivery row is written in the same
transaction as the event it carries, so a host hears of every committed event and of no
rolled-back one. The matching rule lives on the model (`Webhook.wants`; its SQL twin is
`store/ops_sql.py`'s `WEBHOOK_MATCH`); the store writes the rows
(`SystemStore.queue_deliveries` for the services' appends, and the loop's step write, where
on PostgreSQL `ops_sql.delivery_insert` is one more CTE).

Sending happens in the outbox process, never on a process or thread that drives runs
(SEC-8): `webhook_deliver_due` claims due rows (`FOR UPDATE SKIP LOCKED`, then pushes
`next_attempt_at` past the send so no other machine takes them), sends each outside any
transaction within one total deadline per attempt (AGENTRUNS_WEBHOOK_TIMEOUT for
connecting, sending and reading together), and records every attempt. Failures back off
exponentially with jitter until the attempt budget is spent. Delivery is at least once: a
receiver deduplicates by `X-Agentruns-Delivery`.

Whose events (SEC-15): a webhook sends only events of runs (threads, for events between
runs) its owner may see, asked when it is sent, so that a right lost meanwhile counts; the
rest are recorded `withheld` and never sent, and so are a replay's events (GOV-4). The
checks are here, not in the step statement that queues the rows, which runs on every
model turn.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentruns import events as ev
from agentruns.classes import DataClass, Enforcement, may_leave, parse_zone
from agentruns.egress import EGRESS_WITHHELD_VERDICT, WayOut, withheld_marker
from agentruns.gate.core import parse_label
from agentruns.models import (
    Event,
    GateAudit,
    Run,
    Thread,
    WebhookAttempt,
    WebhookDelivery,
)
from agentruns.outbound import PinnedTransport, TargetRefused
from agentruns.tools.policy import result_class

logger = logging.getLogger(__name__)

NO_RESPONSE = "no HTTP response"
SIGNATURE_HEADER = "X-Agentruns-Signature"
DELIVERY_HEADER = "X-Agentruns-Delivery"
EVENT_HEADER = "X-Agentruns-Event"

# ---- the wire format --------------------------------------------------------------------


def delivery_body(delivery: WebhookDelivery) -> bytes:
    """The JSON a receiver gets; the same bytes on every retry of one delivery. Content
    above the webhook's ceiling is withheld (CG-14, `bounded_payload`)."""
    payload, _ = bounded_payload(delivery)
    body = {
        "type": delivery.event_type,
        "run": delivery.run_id,
        "thread": delivery.thread_id,
        "sequence": delivery.sequence,
        "payload": payload,
        "created_at": delivery.event_created_at.isoformat(),
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _content_class(delivery: WebhookDelivery) -> DataClass | None:
    """CG-12, CG-14: the class of what an event's content fields hold — a reply's (or a
    summary's, or a delegated child's task's) label, a result's tool class, for an
    approver's edit of a call's arguments the label of the reply that proposed the call
    (HITL-12). None: nothing it carries was declared (the send that wrote it had no
    declared source, or a person wrote it, CG-2), so it leaves like undeclared content."""
    data: ev.Event | None = ev.parse(delivery.event_type, delivery.payload)
    if isinstance(data, ev.ToolResult):
        return result_class(data.tool, data.data_class or "")
    if isinstance(data, ev.TicketDecided) and data.arguments and delivery.run_id:
        data = _proposing_reply(delivery.run_id, delivery.thread_id, delivery.sequence)
    if isinstance(data, ev.AssistantMessage | ev.Compaction | ev.RunCompleted | ev.UserMessage):
        label = parse_label(data.label)
        return label.data_class if label else None
    return None


def _proposing_reply(run_id: int, thread_id: int, sequence: int) -> ev.AssistantMessage | None:
    """The reply whose call a decided ticket answers: the run's latest before the decision
    (a run waits at one turn; every ticket it waits on is of that turn's calls)."""
    replies = Event.objects.filter(
        thread_id=thread_id, run_id=run_id, type=ev.ASSISTANT, sequence__lt=sequence
    )
    payload = replies.order_by("-sequence").values_list("payload", flat=True).first()
    return ev.AssistantMessage.from_payload(payload) if payload else None


# The fields of an event that hold content (CG-14): what the model wrote, what a tool
# returned, a summary of both. Everything else in a payload is names, ids and counts.
CONTENT_FIELDS = {
    ev.USER: ("text",),  # labelled only as a delegated child's task (CG-12, DEL-2)
    ev.ASSISTANT: ("text",),
    ev.TOOL_RESULT: ("content",),
    ev.COMPACTION: ("summary",),
    ev.RUN_COMPLETED: ("final_reply",),
    ev.TICKET_DECIDED: ("arguments",),  # an approver's edit of the model's (HITL-12)
}
CALL_FIELDS = ("arguments", "raw_arguments")


def bounded_payload(delivery: WebhookDelivery) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The payload as the webhook may receive it, and what was withheld ({field, class}):
    each content field above the ceiling of the webhook's `trust_zone` holds
    "withheld: <class>" instead (CG-14), calls keep their ids and names."""
    payload = delivery.payload
    label = _content_class(delivery)
    ceiling = parse_zone(delivery.webhook.trust_zone).ceiling
    if may_leave(label, ceiling):
        return payload, []
    assert label is not None
    marker = withheld_marker(label)
    bounded, withheld = dict(payload), []
    for field in CONTENT_FIELDS.get(delivery.event_type, ()):
        if bounded.get(field):
            bounded[field] = marker
            withheld.append({"field": field, "class": label.label})
    calls = []
    for index, call in enumerate(bounded.get("tool_calls") or []):
        call = dict(call)
        for field in CALL_FIELDS:
            if call.get(field):
                call[field] = marker
                withheld.append({"field": f"tool_calls.{index}.{field}", "class": label.label})
        calls.append(call)
    if calls:
        bounded["tool_calls"] = calls
    return bounded, withheld


def _audit_withheld(delivery: WebhookDelivery, withheld: list[dict[str, str]]) -> None:
    """CG-14: one `egress.withheld` row per delivery that held something back, naming the
    destination (the webhook), its zone and ceiling, and the class withheld."""
    zone = parse_zone(delivery.webhook.trust_zone)
    GateAudit.objects.create(
        verdict=EGRESS_WITHHELD_VERDICT,
        enforcement=Enforcement.ENFORCE.recorded,
        configuration="",
        run_id=delivery.run_id,
        zone=zone.label,
        ceiling=zone.ceiling.label,
        source_kind=WayOut.WEBHOOK.value,
        source_name=f"#{delivery.webhook_id} {delivery.webhook.url}"[:200],
        data_class=withheld[0]["class"],
    )


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def backoff_seconds(attempts: int) -> float:
    """Exponential in the attempts made so far, capped, with equal jitter so receivers
    that came back are not hit by every sender at once."""
    base = float(settings.AGENTRUNS_WEBHOOK_BACKOFF_SECONDS)
    ceiling = float(settings.AGENTRUNS_WEBHOOK_BACKOFF_MAX_SECONDS)
    delay = min(ceiling, base * 2 ** max(0, attempts - 1))
    return delay / 2 + random.uniform(0, delay / 2)


# ---- sending (on the cluster) -------------------------------------------------------------


@dataclass(frozen=True)
class AttemptResult:
    """What one delivery attempt got back: a status code, or the error that prevented one."""

    status_code: int | None
    latency_ms: int
    error: str
    # When the attempt began: a failure's record shows no duration (SEC-9).
    at: datetime

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def _claim(limit: int) -> list[int]:
    now = timezone.now()
    hold = timedelta(seconds=2 * float(settings.AGENTRUNS_WEBHOOK_TIMEOUT) + 30)
    with transaction.atomic():
        ids = list(
            WebhookDelivery.objects.select_for_update(skip_locked=True)
            .filter(status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now)
            .order_by("next_attempt_at")
            .values_list("pk", flat=True)[:limit]
        )
        if ids:
            WebhookDelivery.objects.filter(pk__in=ids).update(next_attempt_at=now + hold)
    return ids


def _send(client: httpx.Client, delivery: WebhookDelivery) -> AttemptResult:
    body = delivery_body(delivery)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "agentruns-webhooks/1",
        SIGNATURE_HEADER: signature(delivery.webhook.secret, body),
        DELIVERY_HEADER: str(delivery.delivery_id),
        EVENT_HEADER: delivery.event_type,
    }
    started, at = time.monotonic(), timezone.now()
    try:
        response = client.post(delivery.webhook.url, content=body, headers=headers)
    except TargetRefused as exc:
        return AttemptResult(None, 0, str(exc)[:500], at)
    except httpx.HTTPError as exc:
        # SEC-9: refused, reset, timed out or not HTTP read alike (and take no time), so
        # the deliveries list cannot tell an open port from a closed one; the log can.
        logger.info("webhook delivery %s: %s: %s", delivery.pk, type(exc).__name__, exc)
        return AttemptResult(None, 0, NO_RESPONSE, at)
    elapsed = int((time.monotonic() - started) * 1000)
    error = "" if response.is_success else f"HTTP {response.status_code}"
    return AttemptResult(response.status_code, elapsed, error, at)


def _record(delivery: WebhookDelivery, result: AttemptResult) -> None:
    now = result.at  # times count from the attempt's start, never showing its length
    attempts = delivery.attempts + 1
    changes: dict[str, Any] = {
        "attempts": attempts,
        "last_status_code": result.status_code,
        "last_error": result.error,
    }
    withheld: list[dict[str, str]] = []
    if delivery.attempts == 0:  # CG-14: recorded and audited once, with the first attempt
        _, withheld = bounded_payload(delivery)
        if withheld:
            changes["withheld"] = withheld
    if result.ok:
        changes.update(status=WebhookDelivery.Status.DELIVERED, delivered_at=now)
    elif attempts >= int(settings.AGENTRUNS_WEBHOOK_MAX_ATTEMPTS):
        changes.update(status=WebhookDelivery.Status.FAILED)
    else:
        changes.update(next_attempt_at=now + timedelta(seconds=backoff_seconds(attempts)))
    with transaction.atomic():
        if withheld:
            _audit_withheld(delivery, withheld)
        WebhookAttempt.objects.create(
            delivery=delivery,
            at=result.at,
            status_code=result.status_code,
            latency_ms=result.latency_ms,
            error=result.error,
        )
        WebhookDelivery.objects.filter(
            pk=delivery.pk, status=WebhookDelivery.Status.PENDING
        ).update(**changes)


def webhook_deliver_due(*, limit: int = 100, budget_seconds: float = 20.0) -> int:
    """Send what is due, oldest first, until the batch or the time budget is spent;
    returns how many attempts were made. What is left stays claimed briefly, then due."""
    ids = _claim(limit)
    if not ids:
        return 0
    deadline = time.monotonic() + budget_seconds
    seconds = float(settings.AGENTRUNS_WEBHOOK_TIMEOUT)
    timeout = httpx.Timeout(seconds)
    sent = 0
    rows = _in_order(
        WebhookDelivery.objects.select_related("webhook__created_by").filter(pk__in=ids), ids
    )
    sees, replayed = OwnerSees(), replay_threads(rows)
    # SEC-9: each connection goes to an address checked after DNS; redirects are not
    # followed (a 3xx is recorded as a failed attempt). SEC-8: the deadline is per attempt.
    transport = PinnedTransport(deadline_seconds=seconds)
    with httpx.Client(timeout=timeout, follow_redirects=False, transport=transport) as client:
        for delivery in rows:
            if time.monotonic() > deadline:
                WebhookDelivery.objects.filter(pk=delivery.pk).update(
                    next_attempt_at=timezone.now()
                )
                continue
            if not delivery.webhook.active:  # switched off after queueing: never sent
                WebhookDelivery.objects.filter(pk=delivery.pk).update(
                    status=WebhookDelivery.Status.FAILED, last_error="webhook inactive"
                )
                continue
            if not sees(delivery):
                WebhookDelivery.objects.filter(pk=delivery.pk).update(
                    status=WebhookDelivery.Status.WITHHELD, last_error=WITHHELD
                )
                continue
            if delivery.thread_id in replayed:
                WebhookDelivery.objects.filter(pk=delivery.pk).update(
                    status=WebhookDelivery.Status.WITHHELD, last_error=REPLAYED
                )
                continue
            _record(delivery, _send(client, delivery))
            sent += 1
    return sent


WITHHELD = "withheld: the webhook's owner may not see this run"


class OwnerSees:
    """SEC-15: whether a delivery's owner may see its run (or its thread, for an event
    between runs), asked once per owner and run in a batch."""

    def __init__(self) -> None:
        self.known: dict[tuple[int, int | None, int], bool] = {}

    def __call__(self, delivery: WebhookDelivery) -> bool:
        owner = delivery.webhook.created_by
        if owner is None or not owner.is_active:
            return False
        key = (owner.pk, delivery.run_id, delivery.thread_id)
        if key not in self.known:
            if delivery.run_id is not None:
                seen = Run.objects.visible_to(owner).filter(pk=delivery.run_id).exists()
            else:
                seen = Thread.objects.visible_to(owner).filter(pk=delivery.thread_id).exists()
            self.known[key] = seen
        return self.known[key]


REPLAYED = "withheld: a replay's event (GOV-4): nothing a replay does happened"


def replay_threads(deliveries: Iterable[WebhookDelivery]) -> set[int]:
    """GOV-4: which of the deliveries' threads are a replay's, in one query for a batch.
    A replay re-enacts its original's events: they were delivered when they happened, and
    a receiver must not act on them again."""
    threads = {delivery.thread_id for delivery in deliveries}
    replays = Run.objects.filter(thread_id__in=threads, replay__isnull=False)
    return set(replays.values_list("thread_id", flat=True))


def _in_order(rows: Iterable[WebhookDelivery], ids: list[int]) -> list[WebhookDelivery]:
    by_id = {row.pk: row for row in rows}
    return [by_id[pk] for pk in ids if pk in by_id]
