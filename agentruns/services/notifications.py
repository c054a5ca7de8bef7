"""Approvers hear of work (OPS-6): a mail when a ticket opens, and a reminder before its
deadline, sent by the outbox process after the ticket committed (never inside a run's
transaction, never on a process that drives runs: SEC-8). Each send has one total
deadline, EMAIL_TIMEOUT (`agentruns.outbound.DeadlineEmailBackend`).

HITL-14, HITL-15: a routed ticket is mailed only to its approver groups' members
(`policy.recipients`). A configuration's own `remind_after_seconds` replaces the site's
reminder: the sweeper records it (`services.reminders`, with its webhook event) and this
mails it; likewise an escalation, mailed to the escalation group's approvers.

Each mail is claimed first with a conditional update of the ticket's `notified_at` /
`reminded_at` (the site's reminder) / `reminder_mailed_at` / `escalation_mailed_at`, so
two machines never send the same one; a send that fails clears the mark again and the
next pass retries. A mail names the run, the tool and the deadline and
links to the inbox card, a page that shows and never decides (a mail scanner that
prefetches the link cannot approve). It never carries the call's arguments or the question:
names and times only, public by construction (CG-14) — a mail that ever carries content
must name its ceiling and hold the content to it with `may_leave`, as a webhook does.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.mail import send_mass_mail
from django.db.models import F
from django.utils import timezone

from agentruns.models import Ticket
from agentruns.policy import approvers, recipients
from agentruns.store.tickets import TicketRaced, ticket_mark, ticket_unmark

logger = logging.getLogger(__name__)

OPENED = "notified_at"
REMINDER = "reminded_at"
ROUTED_REMINDER = "reminder_mailed_at"  # HITL-15: the configuration's reminder
ESCALATION = "escalation_mailed_at"


def approver_emails() -> set[str]:
    return set(approvers().exclude(email="").values_list("email", flat=True))


def card_url(ticket: Ticket) -> str:
    return f"{settings.AGENTRUNS_SITE_URL}/inbox/{ticket.correlation_id}/"


PREFIXES = {
    OPENED: "",
    REMINDER: "Reminder: ",
    ROUTED_REMINDER: "Reminder: ",
    ESCALATION: "Escalated: ",
}


def message(ticket: Ticket, *, mark: str) -> tuple[str, str]:
    run = ticket.run
    if ticket.answer == Ticket.Answer.INPUT:
        what = f"Run {run.pk} ({run.configuration.slug}) asks a question"
    else:
        what = f"Run {run.pk} ({run.configuration.slug}) asks to call {ticket.tool}"
    subject = f"[agentruns] {PREFIXES[mark]}{what}"
    deadline = ticket.deadline.strftime("%Y-%m-%d %H:%M UTC") if ticket.deadline else "none"
    body = (
        f"{what}.\n\nDeadline: {deadline} (unanswered by then, it counts as a denial).\n\n"
        f"Open the card to review and decide:\n{card_url(ticket)}\n"
    )
    return subject, body


def _claim(ticket_id: int, mark: str) -> bool:
    try:
        ticket_mark(ticket_id, mark, now=timezone.now())
    except TicketRaced:  # another pass mailed it, or it was resolved meanwhile
        return False
    return True


def _send(tickets: list[Ticket], mark: str, budget_seconds: float) -> int:
    """Mail each ticket's recipients until the budget is spent (the rest stay due)."""
    approving = approver_emails() if tickets else set()
    sent = 0
    deadline = time.monotonic() + budget_seconds
    for ticket in tickets:
        if time.monotonic() > deadline:
            break
        to = recipients(ticket, approving, escalation=mark == ESCALATION)
        if not to or not _claim(ticket.pk, mark):
            continue
        subject, body = message(ticket, mark=mark)
        try:
            # One message per person: recipients never see each other's addresses.
            send_mass_mail([(subject, body, settings.DEFAULT_FROM_EMAIL, [email]) for email in to])
        except Exception:
            logger.exception("mail for ticket %s failed; retried on the next pass", ticket.pk)
            ticket_unmark(ticket.pk, mark)
            continue
        sent += 1
    return sent


def tickets_notify_due(*, limit: int = 100, budget_seconds: float = 20.0) -> int:
    """Mail every active ticket nobody was told of yet; returns tickets mailed."""
    due = (
        Ticket.objects.filter(status=Ticket.Status.ACTIVE, notified_at__isnull=True)
        .exclude(kind=Ticket.Kind.TIMER)  # nobody answers a timer (SCHED-3)
        .select_related("run__configuration", "run__created_by")
        .order_by("id")[:limit]
    )
    return _send(list(due), OPENED, budget_seconds)


def tickets_remind_due(*, limit: int = 100, budget_seconds: float = 20.0) -> int:
    """A reminder once a ticket's deadline is within AGENTRUNS_REMINDER_SECONDS; a ticket
    opened already inside that window had its first mail just now and gets none. A
    configuration with its own `remind_after_seconds` has the reminder the sweeper
    recorded instead (HITL-15)."""
    lead = timedelta(seconds=float(settings.AGENTRUNS_REMINDER_SECONDS))
    now = timezone.now()
    due = (
        Ticket.objects.filter(
            status=Ticket.Status.ACTIVE,
            reminded_at__isnull=True,
            notified_at__isnull=False,
            deadline__gt=now,
            deadline__lte=now + lead,
            created_at__lt=F("deadline") - lead,
            run__configuration__remind_after_seconds=None,
        )
        .select_related("run__configuration", "run__created_by")
        .order_by("deadline")[:limit]
    )
    recorded = _recorded(
        ROUTED_REMINDER,
        limit=limit,
        reminded_at__isnull=False,
        run__configuration__remind_after_seconds__isnull=False,
    )
    return _send(list(due), REMINDER, budget_seconds) + _send(
        recorded, ROUTED_REMINDER, budget_seconds
    )


def tickets_escalation_due(*, limit: int = 100, budget_seconds: float = 20.0) -> int:
    """HITL-15: mail the escalation group of every ticket the sweeper escalated."""
    return _send(
        _recorded(ESCALATION, escalated_at__isnull=False, limit=limit), ESCALATION, budget_seconds
    )


def _recorded(mark: str, *, limit: int, **recorded: Any) -> list[Ticket]:
    """Active tickets whose reminder or escalation the sweeper recorded and nobody mailed."""
    due = (
        Ticket.objects.filter(status=Ticket.Status.ACTIVE, **recorded, **{mark: None})
        .select_related("run__configuration", "run__created_by")
        .order_by("id")[:limit]
    )
    return list(due)
