"""Resuming a parked run with exactly one valid answer (HITL-3..HITL-6, HITL-8, HITL-9).

Every check runs before any side effect and a rejected command changes nothing. The run
row lock arbitrates concurrent commands in the database: the first to commit wins, the
others then find no active ticket (`not_awaiting`).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentruns import events as ev
from agentruns.answers import answer_errors
from agentruns.errors import (
    CallMismatch,
    CatalogMismatch,
    CorrelationMismatch,
    Expired,
    InvalidInput,
    NotAwaiting,
    NotFound,
    NotPermitted,
    ResultKindMismatch,
    RunMismatch,
    SelfApproval,
    SnapshotMismatch,
)
from agentruns.models import Run, Ticket, ToolInvocation
from agentruns.runtime.redaction import redact, redact_value
from agentruns.selectors import visible_runs
from agentruns.services.log import append_events
from agentruns.store.transitions import run_requeue_answered
from agentruns.store.wakeups import enqueue_wake

PERMISSION = "permission"
INPUT = "input"
ALLOW = ev.ALLOW
DENY = ev.DENY
KIND_FOR_TARGET: dict[str, str] = {
    Ticket.Kind.TOOL_PERMISSION.value: PERMISSION,
    Ticket.Kind.REMOTE_INPUT.value: INPUT,
}


@dataclass(frozen=True)
class ResumeCommand:
    """The ticket's identity fields, copied by the host, plus the answer."""

    correlation_id: str
    run: int
    snapshot_id: str
    catalog_fingerprint: str
    call_id: str
    kind: str
    decision: str | None = None
    note: str = ""
    value: Any = None


def may_answer(user: Any, run: Run, target: str) -> bool:
    """HITL-9: deciding needs `approve_run`; answering input needs it or initiating the run."""
    if not user.is_authenticated:
        return False
    if user.has_perm("agentruns.approve_run"):
        return True
    return target == INPUT and run.created_by_id == user.pk


def run_resume(*, user: Any, run_id: int, command: ResumeCommand) -> Run:
    run = visible_runs(user).filter(pk=run_id).first()
    if run is None:
        raise NotFound("No such run.")
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("configuration").get(pk=run_id)
        ticket = Ticket.objects.filter(run=run, status=Ticket.Status.ACTIVE).first()
        target = KIND_FOR_TARGET.get(ticket.kind, PERMISSION) if ticket else command.kind
        if not may_answer(user, run, target):
            raise NotPermitted("You may not answer this run's ticket.")
        ticket = _checked(run, ticket, command, user)
        _apply(run, ticket, command, user)
    run.refresh_from_db()
    return run


def _checked(run: Run, ticket: Ticket | None, command: ResumeCommand, user: Any) -> Ticket:
    """HITL-3, in the spec's order."""
    if ticket is None or run.status != Run.Status.AWAITING:
        correlation = _uuid(command.correlation_id)
        if (
            correlation
            and Ticket.objects.filter(
                run=run, correlation_id=correlation, status=Ticket.Status.EXPIRED
            ).exists()
        ):
            raise Expired("The ticket expired; the run went on without an answer.")
        raise NotAwaiting("The run is not waiting for an answer.")
    if str(ticket.correlation_id) != command.correlation_id:
        raise CorrelationMismatch("This answer is for another wait.")
    if ticket.run_id != command.run:
        raise RunMismatch("This answer is for another run.")
    if ticket.snapshot_id != command.snapshot_id:
        raise SnapshotMismatch("The configuration snapshot does not match the ticket.")
    if ticket.catalog_fingerprint != command.catalog_fingerprint:
        raise CatalogMismatch("The tool catalog does not match the ticket.")
    if ticket.deadline and timezone.now() > ticket.deadline:
        raise Expired("The ticket expired.", deadline=ticket.deadline.isoformat())
    if KIND_FOR_TARGET.get(ticket.kind) != command.kind:
        raise ResultKindMismatch(
            f"This ticket takes a {KIND_FOR_TARGET.get(ticket.kind)} answer, not {command.kind}."
        )
    if ticket.call_id != command.call_id:
        raise CallMismatch("This answer is for another call.")
    if command.kind == INPUT:
        # SEC-4: what is stored and sent is the redacted value, so that is what must fit.
        errors = answer_errors(ticket.schema or {}, redact_value(command.value)[0])
        if errors:
            raise InvalidInput("The answer does not fit the question's schema.", fields=errors)
    if (
        command.kind == PERMISSION
        and command.decision == ALLOW
        and run.configuration.require_second_approver
        and run.created_by_id == user.pk
    ):
        raise SelfApproval("This configuration needs a second person to allow the call.")
    return ticket


def _uuid(raw: str) -> str | None:
    try:
        return str(uuid.UUID(raw))
    except (ValueError, TypeError, AttributeError):
        return None


def _apply(run: Run, ticket: Ticket, command: ResumeCommand, user: Any) -> None:
    """One decision event naming who answered; allow moves the call to executing before
    the tool runs (HITL-5); deny and input become the call's result."""
    now = timezone.now()
    who = user.get_username()
    decision = command.decision if command.kind == PERMISSION else INPUT
    # CG-11: what a person typed is stored and sent only redacted.
    note, note_kinds = redact(command.note)
    value, value_kinds = redact_value(command.value)
    items: list[tuple[str, dict[str, Any]]] = [
        (ev.SECRET_REDACTED, {"where": where, "kinds": kinds})
        for where, kinds in (("approver_note", note_kinds), ("answer", value_kinds))
        if kinds
    ]
    decided = {
        "correlation_id": str(ticket.correlation_id),
        "call_id": ticket.call_id,
        "decision": decision,
        "by": who,
        "note": note,
    }
    items.append((ev.TICKET_DECIDED, decided))
    invocation_status = ToolInvocation.Status.EXECUTING
    result: dict[str, Any] | None = None
    if decision == DENY:
        invocation_status = ToolInvocation.Status.DENIED
        said = f": {note}" if note else "."
        items.append(_result(ticket, ev.DENIED, f"Denied by approver {who}{said}"))
    elif decision == INPUT:
        invocation_status = ToolInvocation.Status.COMPLETED
        result = {"ok": True, "data": {"value": value}}
        items.append(_result(ticket, ev.OK, json.dumps(value, ensure_ascii=False)))
    moved = Ticket.objects.filter(pk=ticket.pk, status=Ticket.Status.ACTIVE).update(
        status=Ticket.Status.ANSWERED,
        resolved_at=now,
        resolved_by=user,
        resolution={"decision": decision, "note": note, "value": value},
    )
    assert moved == 1  # the run row lock makes this ours
    ToolInvocation.objects.filter(run=run, call_id=ticket.call_id).exclude(
        status=ToolInvocation.Status.COMPLETED
    ).update(status=invocation_status, result=result, completed_at=now if result else None)
    append_events(thread_id=run.thread_id, run_id=run.pk, items=items)
    _requeue(run)


def _result(ticket: Ticket, status: str, content: str) -> tuple[str, dict[str, Any]]:
    return ev.result_item(ticket.call_id, ticket.tool, status, content)


def _requeue(run: Run) -> None:
    """CLU-4: the run becomes runnable and its wake-up commits in the same transaction."""
    run_requeue_answered(run.pk)
    enqueue_wake(run.pk)


@transaction.atomic
def ticket_expire(*, ticket_id: int) -> bool:
    """HITL-7: an expired ticket resolves as a denial with reason `expired`; never an allow."""
    ticket = Ticket.objects.select_related("run").get(pk=ticket_id)
    run = Run.objects.select_for_update().get(pk=ticket.run_id)
    now = timezone.now()
    moved = Ticket.objects.filter(
        pk=ticket.pk, status=Ticket.Status.ACTIVE, deadline__lt=now
    ).update(status=Ticket.Status.EXPIRED, resolved_at=now, resolution={"decision": ev.EXPIRED})
    if not moved:
        return False
    decided = {
        "correlation_id": str(ticket.correlation_id),
        "call_id": ticket.call_id,
        "decision": ev.EXPIRED,
        "by": None,
        "note": "",
    }
    content = "Expired: nobody answered before the deadline; treat this as a denial."
    append_events(
        thread_id=run.thread_id,
        run_id=run.pk,
        items=[(ev.TICKET_DECIDED, decided), _result(ticket, ev.EXPIRED, content)],
    )
    ToolInvocation.objects.filter(run=run, call_id=ticket.call_id).update(
        status=ToolInvocation.Status.EXPIRED, completed_at=now
    )
    if run.status == Run.Status.AWAITING:
        _requeue(run)
    return True


def ticket_expire_due(limit: int = 500) -> int:
    """The sweeper's share of HITL-7: each expired ticket in its own short transaction."""
    due = Ticket.objects.filter(
        status=Ticket.Status.ACTIVE, deadline__lt=timezone.now()
    ).values_list("pk", flat=True)[:limit]
    return sum(ticket_expire(ticket_id=pk) for pk in list(due))
