"""Ticket and invocation transitions (store/tickets.py: HITL-2, HITL-3, HITL-7, HITL-11,
SCHED-3): each moves a row only from the state it names, and one that must change a row
says so with a typed error when it lost the race, never silently."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentruns.errors import Conflict
from agentruns.models import Ticket, ToolInvocation
from agentruns.store.rows import InvocationChange
from agentruns.store.tickets import (
    TicketRaced,
    invocation_close,
    invocation_settle,
    ticket_edit,
    ticket_mark,
    ticket_resolve_answered,
    ticket_resolve_expired,
    tickets_void,
)
from tests.conftest import grant
from tests.support.ops import parked_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def ticket(django_user_model) -> Ticket:
    user = grant(django_user_model.objects.create_user("ian"), "use_playground")
    return Ticket.objects.get(run_id=parked_run(user), status=Ticket.Status.ACTIVE)


def test_hitl3_a_ticket_is_answered_once_and_the_second_answer_loses_with_a_typed_error(ticket):
    now = timezone.now()
    ticket_resolve_answered(ticket.pk, now=now, resolution={"decision": "allow"})
    with pytest.raises(TicketRaced) as lost:
        ticket_resolve_answered(ticket.pk, now=now, resolution={"decision": "deny"})
    assert isinstance(lost.value, Conflict)  # an HTTP 409 wherever it surfaces
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ANSWERED and ticket.resolution == {"decision": "allow"}
    for move in (
        lambda: ticket_resolve_expired(ticket.pk, now=now + timedelta(days=9), resolution={}),
        lambda: ticket_edit(ticket.pk, arguments={"title": "x"}, digest="d", by=None),
        lambda: ticket_mark(ticket.pk, "notified_at", now=now),
    ):
        with pytest.raises(TicketRaced):
            move()


def test_hitl7_sched3_a_ticket_expires_only_past_its_deadline_and_a_timer_answers_only_when_due(
    ticket,
):
    now = timezone.now()
    assert ticket.deadline is not None and ticket.deadline > now
    with pytest.raises(TicketRaced):
        ticket_resolve_expired(ticket.pk, now=now, resolution={"decision": "expired"})
    with pytest.raises(TicketRaced):  # not a timer
        ticket_resolve_answered(ticket.pk, now=ticket.deadline, due=True, resolution={})
    ticket_resolve_expired(ticket.pk, now=ticket.deadline + timedelta(seconds=1), resolution={})
    assert Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.EXPIRED


def test_hitl11_voiding_reports_how_many_tickets_it_moved_and_a_settled_call_stays(ticket):
    now = timezone.now()
    assert tickets_void(ticket.run_id, now=now) == 1
    assert tickets_void(ticket.run_id, now=now) == 0
    invocation = ToolInvocation.objects.get(run_id=ticket.run_id, call_id=ticket.call_id)
    done = ToolInvocation.Status.COMPLETED
    assert invocation_settle(ticket.run_id, ticket.call_id, status=done, completed_at=now) == 1
    expired = ToolInvocation.Status.EXPIRED
    assert invocation_settle(ticket.run_id, ticket.call_id, status=expired, completed_at=now) == 0
    assert ToolInvocation.objects.get(pk=invocation.pk).status == done
    with pytest.raises(TicketRaced):
        invocation_close(InvocationChange(invocation.pk + 10_000, done, completed_at=now))
