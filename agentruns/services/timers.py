"""Durable timers (SCHED-3): the sweeper answers an `agent.wait` call's `timer` ticket at
its due time, through the path a person's answer takes (the ticket answered, the call's
result and the run's wake-up in one transaction under the run's row lock). While it waits
the run is `awaiting`: no worker, lease or lock; a cancel voids the ticket like any other.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from agentruns import events as ev
from agentruns.models import Run, Ticket, ToolInvocation
from agentruns.services.log import append_events
from agentruns.store.tickets import TicketRaced, invocation_settle, ticket_resolve_answered
from agentruns.store.transitions import run_requeue_answered
from agentruns.store.wakeups import enqueue_wake

logger = logging.getLogger(__name__)

TIMER = ev.TIMED  # the decision a timer ticket's answer records (by nobody)


def timers_due(limit: int = 500) -> int:
    """The sweeper's share of SCHED-3: each due timer in its own short transaction."""
    due = Ticket.objects.filter(
        status=Ticket.Status.ACTIVE, kind=Ticket.Kind.TIMER, deadline__lte=timezone.now()
    ).values_list("pk", flat=True)[:limit]
    return sum(timer_fire(ticket_id=pk) for pk in list(due))


@transaction.atomic
def timer_fire(*, ticket_id: int) -> bool:
    """The call's `ok` result saying it waited; the run queued again. False when the
    ticket was answered, voided (cancel) or is not yet due."""
    ticket = Ticket.objects.get(pk=ticket_id)
    run = Run.objects.select_for_update().get(pk=ticket.run_id)
    now = timezone.now()
    try:
        ticket_resolve_answered(ticket.pk, now=now, due=True, resolution={"decision": TIMER})
    except TicketRaced:
        return False
    waited = (now - ticket.created_at).total_seconds()
    content = f"Waited {waited:.0f} seconds; it is now {now.isoformat()}."
    decided = ev.TicketDecided(str(ticket.correlation_id), ticket.call_id, TIMER)
    invocation_settle(
        run.pk,
        ticket.call_id,
        status=ToolInvocation.Status.COMPLETED,
        result={"ok": True, "data": {"waited_seconds": round(waited)}},
        completed_at=now,
    )
    append_events(
        thread_id=run.thread_id,
        run_id=run.pk,
        items=[
            decided.item(),
            ev.result_item(ticket.call_id, ticket.tool, ev.OK, content),
        ],
    )
    if run.status == Run.Status.AWAITING:
        run_requeue_answered(run.pk)
        enqueue_wake(run.pk)
    logger.info("timer of run %s (%s) is due: the run goes on", run.pk, ticket.call_id)
    return True
