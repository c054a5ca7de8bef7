"""SEC-8: nothing slow outside the loop can hurt a run. Each webhook attempt and each mail
has one total deadline (connect, send and read together, not per read), and both are sent
by the outbox process, off the processes and threads that drive runs."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone
from django_q.models import Schedule

from agentruns.models import Run, Ticket, Webhook, WebhookAttempt, WebhookDelivery
from agentruns.services.notifications import tickets_notify_due
from agentruns.services.webhooks import NO_RESPONSE, webhook_deliver_due
from tests.conftest import grant
from tests.support.clusters import (
    assert_log_consistent,
    configuration,
    running_clusters,
    wait_statuses,
)
from tests.support.ops import TRICKLED_HTTP, TRICKLED_SMTP, SlowServer, hook_owner, parked_run
from tests.support.runs import submit_batch

DEADLINE = 2.0
SLACK = 1.5  # the server notices a hang-up at its next byte (every 0.5 s), and load


@pytest.fixture
def approver(django_user_model):
    user = django_user_model.objects.create_user("ann", email="ann@example.com")
    return grant(user, "approve_run", "use_playground")


@pytest.fixture
def smtp_to(settings):
    """Point mail at a server; the deadline backend is what settings choose for SMTP."""

    def to(server: SlowServer) -> None:
        settings.EMAIL_BACKEND = "agentruns.outbound.DeadlineEmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
        settings.EMAIL_USE_TLS, settings.EMAIL_TIMEOUT = False, DEADLINE

    return to


def held(server: SlowServer) -> list[float]:
    return [c.closed - c.opened for c in server.closed() if c.closed is not None]


@pytest.mark.django_db
def test_sec8_a_receiver_trickling_its_answer_is_cut_off_at_the_attempts_deadline(
    settings, approver
):
    settings.AGENTRUNS_WEBHOOK_TIMEOUT = DEADLINE
    settings.AGENTRUNS_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    receiver = SlowServer(TRICKLED_HTTP, interval=0.5)  # 200 s of status line
    try:
        Webhook.objects.create(
            url=f"http://127.0.0.1:{receiver.port}/hook",
            events=["ticket.opened"],
            secret="s" * 20,
            created_by=hook_owner(),
        )
        parked_run(approver)
        started = time.monotonic()
        assert webhook_deliver_due() == 1
        took = time.monotonic() - started
    finally:
        receiver.close()
    assert took < DEADLINE + SLACK, took  # per read, it would have held on for 200 s
    [attempt] = WebhookAttempt.objects.all()
    assert attempt.status_code is None and attempt.error == NO_RESPONSE
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == WebhookDelivery.Status.PENDING and delivery.attempts == 1
    assert delivery.next_attempt_at > timezone.now()  # retried later, with backoff
    assert all(h < DEADLINE + SLACK for h in held(receiver)), held(receiver)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "greeting", [b"", TRICKLED_SMTP], ids=["never-greets", "greets-a-byte-at-a-time"]
)
def test_sec8_a_mail_server_that_never_answers_holds_a_send_for_its_deadline_only(
    smtp_to, approver, greeting
):
    server = SlowServer(greeting, interval=0.5)
    smtp_to(server)
    try:
        run_id = parked_run(approver)
        started = time.monotonic()
        assert tickets_notify_due() == 0
        took = time.monotonic() - started
    finally:
        server.close()
    assert took < DEADLINE + SLACK, took
    assert len(server.connections) == 1
    ticket = Ticket.objects.get(run_id=run_id)
    assert ticket.notified_at is None  # not sent: the next pass tries again


@pytest.mark.django_db
def test_sec8_no_q2_schedule_sends_webhooks_or_mails_inside_a_run_driving_worker():
    """Migration 0014 dropped the once-a-minute outbox schedule of 0009: a q2 task in a
    worker that drives runs is no place to wait on a receiver (q2's timeout kills the
    worker, and every run in it)."""
    assert not Schedule.objects.filter(func__contains="outbox").exists()


# ---- on a real cluster -------------------------------------------------------------------

WORK = [{"tool_calls": [{"name": "clock.now", "arguments": {}}]}] * 3 + [{"text": "done"}]
ASK = [{"tool_calls": [{"name": "test.external_write", "arguments": {"value": "v"}}]}]


@pytest.fixture
def clusters(transactional_db, tmp_path):
    yield from running_clusters(tmp_path)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_sec8_fifty_runs_finish_first_time_beside_a_trickling_receiver_and_silent_mail(
    clusters, django_user_model
):
    receiver, smtp = SlowServer(TRICKLED_HTTP, interval=0.5), SlowServer(b"")
    try:
        grant(django_user_model.objects.create_user("ann", email="ann@example.com"), "approve_run")
        Webhook.objects.create(
            url=f"http://127.0.0.1:{receiver.port}/hook",
            events=["ticket.opened"],
            secret="s" * 20,
            created_by=hook_owner(),
        )
        asking = submit_batch(configuration("sec8-ask", ASK), 6)  # six tickets, six mails
        work = submit_batch(configuration("sec8-work", WORK, latency_ms=700), 50)
        outbound = {
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": smtp.port,
            "EMAIL_USE_TLS": "0",
            "EMAIL_TIMEOUT": int(DEADLINE),
            "AGENTRUNS_WEBHOOK_TIMEOUT": DEADLINE,
            "AGENTRUNS_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
            "AGENTRUNS_WEBHOOK_BACKOFF_SECONDS": 1,
            "AGENTRUNS_WEBHOOK_BACKOFF_MAX_SECONDS": 1,
        }
        clusters.start("runs", **outbound)
        clusters.start("outbox", command="outbox", **outbound)
        wait_statuses(work, "completed", timeout=180, clusters=clusters)
        wait_statuses(asking, "awaiting", timeout=60, clusters=clusters)
        # Every delivery and every mail was tried and is tried again: a seventh
        # connection to each server is a retry.
        clusters.wait(
            lambda: len(receiver.closed()) >= 7 and len(smtp.closed()) >= 7,
            timeout=120,
            what="each delivery and each mail to be attempted and retried",
        )
    finally:
        clusters.close()
        receiver.close()
        smtp.close()
    attempts = dict(Run.objects.filter(pk__in=[r.pk for r in work]).values_list("pk", "attempts"))
    assert set(attempts.values()) == {0}, attempts  # no run was reclaimed after a crash
    assert_log_consistent(work)
    for server in (receiver, smtp):
        assert max(held(server)) < DEADLINE + SLACK, held(server)
    assert set(WebhookAttempt.objects.values_list("error", flat=True)) == {NO_RESPONSE}
    assert WebhookDelivery.objects.filter(attempts__gte=2).exists()
    assert not WebhookDelivery.objects.exclude(status=WebhookDelivery.Status.PENDING).exists()
