"""OPS-6: a ticket opening mails the people who can answer it, once; a reminder before
the deadline, once; the link opens the card, which shows and never decides."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from agentruns.cluster.outbox import run_outbox
from agentruns.models import Ticket
from agentruns.services.notifications import tickets_notify_due, tickets_remind_due
from tests.conftest import grant
from tests.support.ops import parked_run

pytestmark = pytest.mark.django_db

ASK = {
    "name": "ask_user",
    "arguments": {
        "question": "Which colour?",
        "schema": {"type": "object", "properties": {"colour": {"type": "string"}}},
    },
}


@pytest.fixture
def approver(django_user_model):
    user = django_user_model.objects.create_user("ann", email="ann@example.com")
    return grant(user, "approve_run", "use_playground")


@pytest.fixture
def initiator(django_user_model):
    user = django_user_model.objects.create_user("ian", email="ian@example.com")
    return grant(user, "use_playground")


def test_ops6_a_ticket_opening_mails_approvers_once_with_the_card_link(
    approver, initiator, settings
):
    settings.AGENTRUNS_SITE_URL = "https://agents.example.com"
    run_id = parked_run(initiator)
    ticket = Ticket.objects.get(run_id=run_id)
    assert mail.outbox == []  # nothing inside the run's transaction
    assert tickets_notify_due() == 1
    assert [m.to for m in mail.outbox] == [["ann@example.com"]]  # a permission: approvers only
    sent = mail.outbox[0]
    assert f"https://agents.example.com/inbox/{ticket.correlation_id}/" in sent.body
    assert "notes.write" in sent.subject and str(run_id) in sent.subject
    assert '"body"' not in sent.body  # the call's arguments stay out of mail
    assert tickets_notify_due() == 0
    assert len(mail.outbox) == 1


def test_ops6_a_question_also_mails_its_initiator(approver, initiator):
    parked_run(initiator, "q", calls=[ASK])
    run_outbox()
    assert sorted(m.to[0] for m in mail.outbox) == ["ann@example.com", "ian@example.com"]
    assert all("asks a question" in m.subject for m in mail.outbox)


def test_ops6_a_reminder_goes_once_near_the_deadline(approver, initiator, settings):
    settings.AGENTRUNS_REMINDER_SECONDS = 3600
    run_id = parked_run(initiator, approval_timeout_seconds=24 * 3600)
    tickets_notify_due()
    assert tickets_remind_due() == 0  # the deadline is a day away
    now = timezone.now()  # 23.5 hours later:
    Ticket.objects.filter(run_id=run_id).update(
        created_at=now - timedelta(hours=23.5), deadline=now + timedelta(minutes=30)
    )
    mail.outbox.clear()
    assert tickets_remind_due() == 1
    assert len(mail.outbox) == 1 and mail.outbox[0].subject.startswith("[agentruns] Reminder")
    assert tickets_remind_due() == 0 and len(mail.outbox) == 1


def test_ops6_a_failed_send_is_retried_on_the_next_pass(approver, initiator, monkeypatch):
    parked_run(initiator)
    import agentruns.services.notifications as notifications

    def broken(*args, **kwargs):
        raise OSError("SMTP down")

    monkeypatch.setattr(notifications, "send_mass_mail", broken)
    assert tickets_notify_due() == 0
    monkeypatch.undo()
    assert tickets_notify_due() == 1 and len(mail.outbox) == 1


def test_ops6_a_short_ticket_gets_no_separate_reminder(approver, initiator, settings):
    settings.AGENTRUNS_REMINDER_SECONDS = 3600
    parked_run(initiator, approval_timeout_seconds=600)
    assert tickets_notify_due() == 1
    assert tickets_remind_due() == 0


def test_ops6_the_mailed_link_opens_the_card_and_a_get_never_decides(approver, initiator):
    from urllib.parse import urlsplit

    from django.test import Client

    run_id = parked_run(initiator)
    tickets_notify_due()
    link = next(line for line in mail.outbox[0].body.splitlines() if "/inbox/" in line)
    client = Client()
    client.force_login(approver)
    for _ in range(2):  # a mail scanner prefetching it, then the person
        page = client.get(urlsplit(link).path)
        assert page.status_code == 200
    ticket = Ticket.objects.get(run_id=run_id)
    assert ticket.status == Ticket.Status.ACTIVE and str(ticket.correlation_id) in link


def test_ops6_the_demo_admin_has_an_address_so_make_run_shows_the_mail(django_user_model):
    """`make run` prints mails on the console: the demo's approver must have an address."""
    from agentruns.demo import load_demo_users

    load_demo_users()
    admin = django_user_model.objects.get(username="admin")
    parked_run(django_user_model.objects.get(username="member"))
    assert tickets_notify_due() == 1
    assert [m.to for m in mail.outbox] == [[admin.email]]
