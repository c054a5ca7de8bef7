"""Issue 11 item 7: the operator's status answers what is stuck, why and what it cost, in
`manage.py cluster_status` (table and --json) and the admin page."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from agentruns.cluster.status import snapshot
from agentruns.models import DailyUsage, ToolInvocation, Webhook, WebhookDelivery
from tests.support.catalog import make_configuration
from tests.support.ops import parked_run

pytestmark = pytest.mark.django_db


def test_status_shows_waiting_runs_uncertain_calls_spend_and_webhook_failures(staff):
    waiting = parked_run(staff, "wait")
    ToolInvocation.objects.filter(run_id=waiting).update(status="uncertain")
    priced = make_configuration("priced", input_token_price="1.5", output_token_price="3")
    DailyUsage.objects.create(
        configuration=priced, day=timezone.now().date(), input_tokens=2000, output_tokens=1000
    )
    hook = Webhook.objects.create(url="http://127.0.0.1:9/", secret="x" * 16)
    for status, attempts in (("failed", 8), ("pending", 2), ("pending", 0)):
        WebhookDelivery.objects.create(
            webhook=hook,
            event_type="run.completed",
            thread_id=1,
            sequence=1,
            event_created_at=timezone.now(),
            status=status,
            attempts=attempts,
        )
    snap = snapshot()
    assert [pk for pk, _ in snap.awaiting_longest] == [waiting]
    assert snap.uncertain_calls == [waiting]
    priced = {
        "input_tokens": 2000,
        "output_tokens": 1000,
        "cost": "0.006000",
        "currency": "USD",
        "priced": True,
    }
    assert snap.spend_today["priced"] == priced
    assert snap.spend_today["wait"]["input_tokens"] > 0  # the parked run's first turn
    assert (snap.webhooks_failed, snap.webhooks_retrying) == (1, 1)
    out = StringIO()
    call_command("cluster_status", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["spend_today"]["priced"]["cost"] == "0.006000"
    assert data["webhooks_failed"] == 1 and data["uncertain_calls"] == [waiting]
    out = StringIO()
    call_command("cluster_status", stdout=out)
    text = out.getvalue()
    assert "priced: 2000 in + 1000 out = 0.006000" in text
    assert "1 gave up, 1 retrying" in text and f"run {waiting}" in text
