"""Reminders and escalation (HITL-15), recorded by the sweeper once per ticket.

A ticket of a configuration with `remind_after_seconds` that is still open that long after
it opened is *reminded*; one of a configuration with an `escalation_group` is *escalated*
once 80 % of its deadline has passed (`policy.escalation_due`; from then on the group's
approvers may decide it, whether or not this has run yet). Each is recorded by a
conditional update of `reminded_at` / `escalated_at` that must change exactly one row, in
the transaction that appends the `ticket.reminded` / `ticket.escalated` event, whose
webhook deliveries are queued with it (OPS-4): of two sweepers at once, one records and
emits, the other changes nothing. The mails follow from the outbox process, which claims
each once (`notifications.tickets_remind_due`; SEC-8: no mail is sent from a sweeper).

The run row is locked first, as by an expiry or a resume: while the ticket is active no
worker holds the run, so the append never interleaves with a step's.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agentruns import events as ev
from agentruns.models import Configuration, Run, Ticket
from agentruns.policy import any_of, escalation_due
from agentruns.services.log import append_events
from agentruns.store.tickets import TicketRaced, ticket_mark

REMINDED, ESCALATED = "reminded_at", "escalated_at"


def _remind_due(now: datetime) -> Q:
    """Tickets opened at least their configuration's `remind_after_seconds` ago."""
    rows = Configuration.objects.filter(remind_after_seconds__isnull=False).values_list(
        "pk", "remind_after_seconds"
    )
    return any_of(
        Q(run__configuration_id=pk, created_at__lte=now - timedelta(seconds=seconds or 0))
        for pk, seconds in rows
    )


def _record(ticket_id: int, mark: str, now: datetime) -> bool:
    """Record `mark` and its event in one transaction, iff nobody recorded it first."""
    with transaction.atomic():
        ticket = Ticket.objects.select_related("run__configuration__escalation_group").get(
            pk=ticket_id
        )
        Run.objects.select_for_update().filter(pk=ticket.run_id).values_list("pk").get()
        try:
            ticket_mark(ticket_id, mark, now=now)
        except TicketRaced:
            return False
        append_events(
            thread_id=ticket.thread_id, run_id=ticket.run_id, items=[_event(ticket, mark)]
        )
    return True


def _event(ticket: Ticket, mark: str) -> ev.Item:
    """What a webhook receiver hears: which ticket, never its arguments or recipients."""
    which = (
        str(ticket.correlation_id),
        ticket.call_id,
        ticket.kind,
        ticket.tool,
        ticket.deadline.isoformat() if ticket.deadline else None,
    )
    if mark == REMINDED:
        return ev.TicketReminded(*which).item()
    group = ticket.run.configuration.escalation_group
    return ev.TicketEscalated(*which, group=group.name if group else None).item()


def tickets_remind_and_escalate(*, limit: int = 500) -> tuple[int, int]:
    """The sweeper's share of HITL-15: (tickets reminded, tickets escalated) by this call."""
    now = timezone.now()
    counts = []
    for mark, due in ((REMINDED, _remind_due(now)), (ESCALATED, escalation_due(now))):
        ids = list(
            Ticket.objects.filter(due, status=Ticket.Status.ACTIVE, **{mark: None})
            .exclude(kind=Ticket.Kind.TIMER)  # nobody answers a timer (SCHED-3)
            .order_by("id")
            .values_list("pk", flat=True)[:limit]
        )
        counts.append(sum(_record(pk, mark, now) for pk in ids))
    return counts[0], counts[1]
