"""OPS-4: webhooks queued in the event's transaction, sent by the cluster with a signature
and a stable delivery id, retried with backoff, every attempt recorded."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentruns.cluster.process import wait_for
from agentruns.events import LogEntry
from agentruns.models import Event, Run, Webhook, WebhookAttempt, WebhookDelivery
from agentruns.runtime import journal
from agentruns.runtime.loop import execute_run
from agentruns.services.webhooks import NO_RESPONSE, backoff_seconds, webhook_deliver_due
from agentruns.store import store
from agentruns.store.records import Lease, Rows, Step
from agentruns.store.rows import RunUpdate
from agentruns.store.steps import Subscribers
from tests.support.catalog import make_configuration, make_provider
from tests.support.ops import Receiver, client_for, hook_owner, refused_port

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "s3cret-for-signing-0123456789"


@pytest.fixture(autouse=True)
def _loopback_receivers(settings):
    """The receivers here listen on loopback, which SEC-9 refuses unless allow-listed
    (tests/sec/test_webhook_targets.py shows the refusals)."""
    settings.AGENTRUNS_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]


def hook(url: str, events: list[str] | None = None, **kw) -> Webhook:
    kw.setdefault("created_by", hook_owner())
    return Webhook.objects.create(url=url, events=events or [], secret=SECRET, **kw)


def submit(staff, slug: str = "wh") -> int:
    make_configuration(
        slug, provider=make_provider(f"{slug}-p", zone="local"), script={"turns": [{"text": "hi"}]}
    )
    response = client_for(staff).post(
        "/api/runs/", {"configuration": slug, "input": "hello"}, format="json"
    )
    assert response.status_code == 201
    return response.json()["id"]


def make_due() -> None:
    """Skip the backoff wait without sleeping: the next pass finds the rows due."""
    WebhookDelivery.objects.filter(status="pending").update(next_attempt_at=timezone.now())


def test_ops4_staff_register_webhooks_and_the_secret_is_never_read_back(staff, member):
    api = client_for(staff)
    created = api.post(
        "/api/webhooks/",
        {"url": "http://127.0.0.1:9/x", "events": ["run.completed"], "secret": SECRET},
        format="json",
    )
    assert created.status_code == 201, created.content
    data = created.json()
    assert "secret" not in data and data["created_by"] == "staff"
    assert Webhook.objects.get(pk=data["id"]).secret == SECRET
    patched = api.patch(f"/api/webhooks/{data['id']}/", {"active": False}, format="json")
    assert patched.status_code == 200 and patched.json()["active"] is False
    assert Webhook.objects.get(pk=data["id"]).secret == SECRET
    bad = api.post(
        "/api/webhooks/", {"url": "http://x/", "events": ["nope"], "secret": SECRET}, format="json"
    )
    assert bad.status_code == 400
    assert client_for(member).get("/api/webhooks/").status_code == 403


def test_ops4_a_submission_queues_one_delivery_per_matching_active_webhook(staff):
    wanted = hook("http://127.0.0.1:9/a", ["message.user"])
    everything = hook("http://127.0.0.1:9/b")
    hook("http://127.0.0.1:9/c", ["run.completed"])
    hook("http://127.0.0.1:9/d", ["message.user"], active=False)
    run_id = submit(staff)
    rows = WebhookDelivery.objects.filter(run_id=run_id, event_type="message.user")
    assert sorted(rows.values_list("webhook_id", flat=True)) == [wanted.pk, everything.pk]
    row = rows.first()
    assert row.payload == {"text": "hello"} and row.sequence == 1 and row.status == "pending"


def test_ops4_deliveries_commit_or_roll_back_with_their_events(staff):
    from django.db import transaction

    from agentruns.services.log import append_events

    hook("http://127.0.0.1:9/a")
    run_id = submit(staff, "first")
    run = Run.objects.get(pk=run_id)
    before = WebhookDelivery.objects.count()
    with pytest.raises(RuntimeError), transaction.atomic():
        append_events(thread_id=run.thread_id, run_id=run.pk, items=[("run.cancelled", {})])
        assert WebhookDelivery.objects.count() == before + 1
        raise RuntimeError("the event's transaction fails")
    assert WebhookDelivery.objects.count() == before


def test_ops4_receiver_failing_then_succeeding_gets_signed_retries_all_recorded(staff, settings):
    settings.AGENTRUNS_WEBHOOK_MAX_ATTEMPTS = 5
    receiver = Receiver(statuses=[500, 200])
    try:
        hook(receiver.url, ["message.user"])
        run_id = submit(staff)
        assert webhook_deliver_due() == 1
        delivery = WebhookDelivery.objects.get()
        assert delivery.status == "pending" and delivery.attempts == 1
        assert delivery.next_attempt_at > timezone.now()  # backing off
        assert webhook_deliver_due() == 0  # not due yet
        make_due()
        assert webhook_deliver_due() == 1
    finally:
        receiver.close()
    delivery.refresh_from_db()
    assert delivery.status == "delivered" and delivery.attempts == 2
    attempts = list(WebhookAttempt.objects.filter(delivery=delivery))
    assert [a.status_code for a in attempts] == [500, 200]
    assert attempts[0].error == "HTTP 500" and attempts[1].error == ""
    assert all(a.latency_ms >= 0 for a in attempts)
    first, second = receiver.received
    assert first.body == second.body
    for got in receiver.received:
        expected = "sha256=" + hmac.new(SECRET.encode(), got.body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(got.headers["X-Agentruns-Signature"], expected)
        assert got.headers["X-Agentruns-Delivery"] == str(delivery.delivery_id)
    body = json.loads(first.body)
    assert body["type"] == "message.user" and body["run"] == run_id
    assert body["payload"] == {"text": "hello"} and body["sequence"] == 1
    assert set(body) == {"type", "run", "thread", "sequence", "payload", "created_at"}


def test_ops4_a_refused_connection_is_retried_then_given_up(staff, settings):
    settings.AGENTRUNS_WEBHOOK_MAX_ATTEMPTS = 2
    hook(f"http://127.0.0.1:{refused_port()}/gone", ["message.user"])
    submit(staff)
    webhook_deliver_due()
    make_due()
    webhook_deliver_due()
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "failed" and delivery.attempts == 2
    errors = list(WebhookAttempt.objects.values_list("status_code", "error"))
    assert len(errors) == 2 and all(code is None and err == NO_RESPONSE for code, err in errors)
    make_due()
    assert webhook_deliver_due() == 0  # given up: never sent again


def test_ops4_a_hanging_receiver_never_slows_a_run_and_times_out_on_the_cluster(staff, settings):
    settings.AGENTRUNS_WEBHOOK_TIMEOUT = 0.5
    receiver = Receiver(statuses=[200], hang=threading.Event())
    try:
        hook(receiver.url)
        run_id = submit(staff)
        started = time.monotonic()
        assert execute_run(run_id) == "completed"
        assert time.monotonic() - started < 2.0  # no send on the run's path
        assert WebhookDelivery.objects.filter(status="pending").exists()
        started = time.monotonic()
        webhook_deliver_due(limit=1)
        assert time.monotonic() - started < 3.0  # bounded by the short timeout
    finally:
        receiver.close()
    attempt = WebhookAttempt.objects.get()
    assert attempt.status_code is None and attempt.error == NO_RESPONSE  # as a refusal


def test_ops4_claimed_deliveries_are_not_taken_by_a_second_sender(staff):
    """Two machines' passes never send one delivery at once: a claim moves the row out
    of the due set (under FOR UPDATE SKIP LOCKED) before anything is sent."""
    from agentruns.services.webhooks import _claim

    hook("http://127.0.0.1:9/a", ["message.user"])
    submit(staff)
    results: list[list[int]] = []
    barrier = threading.Barrier(2)

    def claim() -> None:
        from django.db import connection

        barrier.wait()
        results.append(_claim(10))
        connection.close()

    threads = [threading.Thread(target=claim) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(len(r) for r in results) == [0, 1]


def test_ops4_backoff_grows_exponentially_with_jitter(settings):
    settings.AGENTRUNS_WEBHOOK_BACKOFF_SECONDS = 10
    settings.AGENTRUNS_WEBHOOK_BACKOFF_MAX_SECONDS = 100
    for attempts, delay in ((1, 10), (2, 20), (3, 40), (4, 80), (9, 100)):
        samples = [backoff_seconds(attempts) for _ in range(50)]
        assert all(delay / 2 <= s <= delay for s in samples)
        assert len(set(samples)) > 1


def test_ops4_the_admin_registers_a_webhook_without_showing_its_secret(django_user_model):
    from django.test import Client

    root = django_user_model.objects.create_superuser("root", password="pw")
    client = Client()
    client.force_login(root)
    add = "/admin/agentruns/webhook/add/"
    assert client.get(add).status_code == 200
    response = client.post(
        add, {"url": "http://127.0.0.1:9/x", "events": "[]", "secret": SECRET, "active": "on"}
    )
    assert response.status_code == 302, response.content
    created = Webhook.objects.get()
    assert created.created_by == root and created.secret == SECRET
    change = client.get(f"/admin/agentruns/webhook/{created.pk}/change/")
    assert SECRET not in change.content.decode()
    edited = client.post(
        f"/admin/agentruns/webhook/{created.pk}/change/",
        {"url": "http://127.0.0.1:9/y", "events": "[]", "secret": "", "active": "on"},
    )
    assert edited.status_code == 302
    created.refresh_from_db()
    assert created.url.endswith("/y") and created.secret == SECRET
    for page in ("webhookdelivery", "dailyusage", "auditrecord"):
        assert client.get(f"/admin/agentruns/{page}/").status_code == 200


def test_ops4_the_loops_events_are_queued_by_its_step_statement(staff):
    done = hook("http://127.0.0.1:9/done", ["run.completed"])
    replies = hook("http://127.0.0.1:9/turns", ["message.assistant"])
    run_id = submit(staff)
    assert execute_run(run_id) == "completed"
    rows = WebhookDelivery.objects.filter(run_id=run_id).order_by("sequence")
    assert [(r.webhook_id, r.event_type) for r in rows] == [
        (replies.pk, "message.assistant"),
        (done.pk, "run.completed"),
    ]
    assistant = rows[0]
    assert assistant.payload["text"] == "hi" and "usage" in assistant.payload
    assert len({r.delivery_id for r in rows}) == 2


def _claimed_lease(run_id: int) -> Lease:
    assert store().claim(run_id, "test-worker", 60) is not None
    run = Run.objects.get(pk=run_id)
    return Lease(run.pk, run.thread_id, run.configuration_id, run.epoch, "test-worker")


def _step(run_id: int, sequence: int) -> Step:
    entry = LogEntry(sequence, "message.assistant", {"text": "hi", "tool_calls": []}, run_id)
    return Step(events=[entry], after=sequence - 1, rows=Rows(run_update=RunUpdate(turns=sequence)))


def test_ops4_while_nobody_subscribed_a_step_leaves_the_outbox_out_but_not_a_new_webhook(staff):
    """The loop's step leaves the outbox CTE out while it last saw no active webhook (PERF-1),
    fenced on there still being none: a webhook activated since gets the step's events
    all the same, from the step written again with its outbox."""
    lease = _claimed_lease(submit(staff))
    journal.write(lease, _step(lease.run_id, 2))
    assert Subscribers.seen is False
    with CaptureQueriesContext(connection) as quiet:
        journal.write(lease, _step(lease.run_id, 3))
    (alone,) = (query["sql"] for query in quiet.captured_queries)
    assert "agentruns_webhookdelivery" not in alone
    done = hook("http://127.0.0.1:9/turns", ["message.assistant"])
    with CaptureQueriesContext(connection) as statements:
        journal.write(lease, _step(lease.run_id, 4))
    first, again = (query["sql"] for query in statements.captured_queries)
    assert "agentruns_webhookdelivery" not in first and "agentruns_webhookdelivery" in again
    assert Subscribers.seen is True
    rows = WebhookDelivery.objects.filter(run_id=lease.run_id, event_type="message.assistant")
    assert list(rows.values_list("webhook_id", "sequence")) == [(done.pk, 4)]
    assert Run.objects.get(pk=lease.run_id).turns == 4
    assert Event.objects.filter(run_id=lease.run_id, sequence__gte=2).count() == 3


def test_ops4_the_outbox_loop_sends_what_is_due_until_stopped(staff):
    """`manage.py outbox`'s loop (SEC-8: its own process) delivers a queued event, and a
    stop request ends it after the pass in flight."""
    from agentruns.cluster.outbox import serve_outbox

    receiver = Receiver(statuses=[200])
    stop = threading.Event()
    loop = threading.Thread(target=serve_outbox, args=(stop,), kwargs={"interval": 0.05})
    try:
        hook(receiver.url, ["message.user"])
        submit(staff)
        loop.start()
        delivered = WebhookDelivery.objects.filter(status=WebhookDelivery.Status.DELIVERED)
        wait_for(delivered.exists, timeout=20, what="the outbox loop to deliver")
        assert delivered.count() == 1 and len(receiver.received) == 1
    finally:
        stop.set()
        loop.join(timeout=20)
        receiver.close()
    assert not loop.is_alive()


def test_ops4_a_webhook_switched_off_after_queueing_sends_nothing(staff):
    receiver = Receiver(statuses=[200])
    try:
        off = hook(receiver.url, ["message.user"])
        submit(staff)
        Webhook.objects.filter(pk=off.pk).update(active=False)
        assert webhook_deliver_due() == 0
    finally:
        receiver.close()
    assert receiver.received == []
    assert WebhookDelivery.objects.get().status == "failed"
