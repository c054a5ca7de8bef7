"""Every change of a ticket's status (HITL-2, HITL-3, HITL-7, HITL-11, SCHED-3, DEL-1) and
of an invocation's status outside the loop's own steps, beside store/transitions.py (which
does `Run.status`). Each is a conditional update on the state it moves from: one that must
change exactly one row raises `TicketRaced` when it changed none (another answer, an
expiry, a cancel or the timer got there first); a bulk change says how many rows it moved.
The callers (services) hold the run's row lock, so a race lost under it is a bug, and a
race lost without it (the sweepers) is an answer: "somebody else did it"."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Q

from agentruns.errors import Conflict
from agentruns.models import Ticket, ToolInvocation
from agentruns.store.rows import InvocationChange

ACTIVE = Ticket.Status.ACTIVE
# What the mail and reminder passes stamp on an active ticket, once each (HITL-15).
MARKS = (
    "notified_at",
    "reminded_at",
    "escalated_at",
    "reminder_mailed_at",
    "escalation_mailed_at",
)


class TicketRaced(Conflict):
    """The ticket (or invocation) was no longer in the state the transition moves from."""


def _one(moved: int, what: str, ticket_id: int) -> None:
    if moved != 1:
        raise TicketRaced(f"Ticket {ticket_id} was resolved meanwhile ({what} changed no row).")


def _active(ticket_id: int, *also: Q) -> Any:
    return Ticket.objects.filter(Q(pk=ticket_id, status=ACTIVE), *also)


def ticket_resolve_answered(
    ticket_id: int,
    *,
    resolution: dict[str, Any],
    now: datetime,
    by: Any = None,
    due: bool = False,
) -> None:
    """active → answered: a person's answer (`by`, HITL-3), a child's hand-back (DEL-1),
    or with `due` a timer whose time came (SCHED-3: only a timer, only once due)."""
    also = [Q(kind=Ticket.Kind.TIMER, deadline__lte=now)] if due else []
    moved = _active(ticket_id, *also).update(
        status=Ticket.Status.ANSWERED, resolved_at=now, resolved_by=by, resolution=resolution
    )
    _one(moved, "active → answered", ticket_id)


def ticket_resolve_expired(ticket_id: int, *, resolution: dict[str, Any], now: datetime) -> None:
    """active → expired once past its deadline (HITL-7); a timer's deadline is its due
    time, so a timer never expires (SCHED-3)."""
    moved = (
        _active(ticket_id, Q(deadline__lt=now))
        .exclude(kind=Ticket.Kind.TIMER)
        .update(status=Ticket.Status.EXPIRED, resolved_at=now, resolution=resolution)
    )
    _one(moved, "active → expired", ticket_id)


def tickets_void(run_id: int, *, now: datetime) -> int:
    """active → void for every ticket of a run cancelled while parked (HITL-11); how many."""
    return Ticket.objects.filter(run_id=run_id, status=ACTIVE).update(
        status=Ticket.Status.VOID, resolved_at=now
    )


def ticket_edit(ticket_id: int, *, arguments: dict[str, Any] | None, digest: str, by: Any) -> None:
    """HITL-12: the arguments an active ticket's approvers now decide on (None, "", None:
    back to the model's own)."""
    moved = _active(ticket_id).update(
        edited_arguments=arguments, edited_digest=digest, edited_by=by
    )
    _one(moved, "edit of an active ticket", ticket_id)


def ticket_mark(ticket_id: int, mark: str, *, now: datetime) -> None:
    """Stamp `mark` (one of MARKS) on an active ticket that does not carry it yet: the
    one pass that wins sends the mail or records the reminder."""
    assert mark in MARKS
    _one(_active(ticket_id, Q(**{mark: None})).update(**{mark: now}), mark, ticket_id)


def ticket_unmark(ticket_id: int, mark: str) -> None:
    """Take `mark` back (its mail failed), so the next pass tries again."""
    assert mark in MARKS
    Ticket.objects.filter(pk=ticket_id).update(**{mark: None})


def invocation_settle(
    run_id: int,
    call_id: str,
    *,
    status: str,
    completed_at: datetime | None,
    result: dict[str, Any] | None = None,
    **changes: Any,
) -> int:
    """The invocation of a parked call moves on with its ticket (executing once allowed,
    else its final status and result; HITL-12's edited arguments as `changes`). Never a
    completed one: a result recorded already stays. How many rows moved (0 or 1: a ticket
    may have no invocation of its own)."""
    rows = ToolInvocation.objects.filter(run_id=run_id, call_id=call_id)
    return rows.exclude(status=ToolInvocation.Status.COMPLETED).update(
        status=status, completed_at=completed_at, result=result, **changes
    )


def invocation_close(change: InvocationChange) -> None:
    """An open call of a run cancelled while parked closed (runtime/effects.py), by row."""
    moved = ToolInvocation.objects.filter(pk=change.pk).update(**change.changes())
    if moved != 1:
        raise TicketRaced(f"Invocation {change.pk} is gone.")
