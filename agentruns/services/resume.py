"""Resuming a parked run with exactly one valid answer (HITL-3..HITL-6, HITL-8, HITL-9,
HITL-12, HITL-13, HITL-14).

Every check runs before any side effect and a rejected command changes nothing. The run
row lock arbitrates concurrent commands in the database: the first to commit wins, the
others then find no active ticket (`not_awaiting`).
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, replace
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentruns import events as ev
from agentruns.answers import answer_errors, bounds_problem
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
from agentruns.models import Run, Ticket, TicketIdentity, ToolInvocation
from agentruns.policy import four_eyes, may_answer, may_decide, may_see_ticket, visible_runs
from agentruns.runtime.redaction import redact, redact_value
from agentruns.services.approvals import (
    Count,
    Edit,
    approval_record,
    approval_refusal,
    edit_checked,
    edited_invocation,
)
from agentruns.services.log import append_events
from agentruns.store.tickets import (
    TicketRaced,
    invocation_settle,
    ticket_resolve_answered,
    ticket_resolve_expired,
)
from agentruns.store.transitions import run_requeue_answered
from agentruns.store.wakeups import enqueue_wake

logger = logging.getLogger(__name__)

PERMISSION, INPUT = Ticket.Answer.PERMISSION, Ticket.Answer.INPUT  # local shorthands


@dataclass(frozen=True)
class ResumeCommand:
    """The ticket's identity, copied by the host, plus the answer: `answer` is its kind
    (`Ticket.Answer`), `decision` allow or deny for a permission, `value` for input. An
    allow may carry edited `arguments` (HITL-12); `tool`, when given, must be the ticket's;
    `arguments_digest`, when given, must be that of the arguments an allow now approves."""

    identity: TicketIdentity
    answer: str
    decision: str | None = None
    note: str = ""
    value: Any = None
    arguments: Any = None
    tool: str | None = None
    arguments_digest: str | None = None  # of the arguments the approver was shown


def run_resume(*, user: Any, run_id: int, command: ResumeCommand) -> Run:
    run = visible_runs(user).filter(pk=run_id).first()
    if run is None:
        raise NotFound("No such run.")
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("configuration").get(pk=run_id)
        ticket = Ticket.objects.filter(run=run, status=Ticket.Status.ACTIVE).first()
        if ticket is not None and not may_see_ticket(user, ticket):
            raise NotFound("No such run.")  # HITL-14: routed to others, and not theirs
        allowed = may_decide(user, ticket) if ticket else may_answer(user, run, command.answer)
        if not allowed:
            raise NotPermitted("You may not answer this run's ticket.")
        ticket, edit = _checked(run, ticket, command, user)
        count = _counted(run, ticket, command, user, edit)
        if count is None or count.reached:
            _apply(run, ticket, command, user, edit, count)
        else:
            _approval_items(run, ticket, command, user, edit, count)
    # UI-7: who decided what, for the operator; never the arguments, a note or an answer.
    decision = command.decision if command.answer == PERMISSION else "answered"
    if count is not None and not count.reached:
        decision = f"approval {len(count.approvers)} of {count.required}"
    logger.info(
        "ticket %s of run %s (%s): %s by %s",
        ticket.correlation_id,
        run.pk,
        ticket.tool,
        decision,
        user.get_username(),
    )
    run.refresh_from_db()
    return run


def _checked(
    run: Run, ticket: Ticket | None, command: ResumeCommand, user: Any
) -> tuple[Ticket, Edit | None]:
    """HITL-3, in the spec's order; then HITL-12's edit and HITL-13's one count a person."""
    given = command.identity
    if ticket is None or run.status != Run.Status.AWAITING:
        correlation = _uuid(given.correlation_id)
        if (
            correlation
            and Ticket.objects.filter(
                run=run, correlation_id=correlation, status=Ticket.Status.EXPIRED
            ).exists()
        ):
            raise Expired("The ticket expired; the run went on without an answer.")
        raise NotAwaiting("The run is not waiting for an answer.")
    expected = ticket.identity
    if expected.correlation_id != given.correlation_id:
        raise CorrelationMismatch("This answer is for another wait.")
    if expected.run != given.run:
        raise RunMismatch("This answer is for another run.")
    if expected.snapshot_id != given.snapshot_id:
        raise SnapshotMismatch("The configuration snapshot does not match the ticket.")
    if expected.catalog_fingerprint != given.catalog_fingerprint:
        raise CatalogMismatch("The tool catalog does not match the ticket.")
    if ticket.deadline and timezone.now() > ticket.deadline:
        raise Expired("The ticket expired.", deadline=ticket.deadline.isoformat())
    if ticket.kind == Ticket.Kind.DELEGATION:  # DEL-1: only the child's end answers it
        raise ResultKindMismatch("This ticket is answered by its child run's end, not a person.")
    if ticket.answer != command.answer:
        raise ResultKindMismatch(
            f"This ticket takes a {ticket.answer} answer, not {command.answer}."
        )
    if expected.call_id != given.call_id:
        raise CallMismatch("This answer is for another call.")
    if command.answer == INPUT:
        too_big = bounds_problem(command.value)  # SEC-18: before redaction walks it
        if too_big:
            raise InvalidInput(f"The answer is refused: {too_big}.", fields={"": [too_big]})
        # SEC-4: what is stored and sent is the redacted value, so that is what must fit.
        errors = answer_errors(ticket.schema or {}, redact_value(command.value)[0])
        if errors:
            raise InvalidInput("The answer does not fit the question's schema.", fields=errors)
    if command.answer != PERMISSION:
        return ticket, None
    edit = edit_checked(
        ticket, decision=command.decision, tool=command.tool, arguments=command.arguments
    )
    if command.decision == ev.ALLOW:
        if four_eyes(user, run).blocks:
            raise SelfApproval("This configuration needs a second person to allow the call.")
        approval_refusal(ticket, user, edit, command.arguments_digest)
    return ticket, edit


def _counted(
    run: Run, ticket: Ticket, command: ResumeCommand, user: Any, edit: Edit | None
) -> Count | None:
    """HITL-13: an allow is recorded as it arrives; None for any other answer."""
    if command.answer != PERMISSION or command.decision != ev.ALLOW:
        return None
    return approval_record(run, ticket, user, edit)


def _approval_items(
    run: Run, ticket: Ticket, command: ResumeCommand, user: Any, edit: Edit | None, count: Count
) -> None:
    """One allow of a quorum not yet reached: the ticket stays active, the run awaiting."""
    note, note_kinds = redact(command.note)
    approved = ev.TicketApproved(
        correlation_id=str(ticket.correlation_id),
        call_id=ticket.call_id,
        by=user.get_username(),
        note=note,
        approvals=len(count.approvers),
        required=count.required,
        approvers=tuple(count.approvers),
        edit=_edit_record(ticket),
    )
    append_events(
        thread_id=run.thread_id,
        run_id=run.pk,
        items=[*_redacted_items(edit, note_kinds, {}), approved.item()],
    )


def _edit_record(ticket: Ticket) -> ev.EditRecord | None:
    """HITL-12: both digests and who edited, when the pending arguments are an edit."""
    if not ticket.edited_digest:
        return None
    editor = ticket.edited_by
    return ev.EditRecord(
        original_digest=ticket.arguments_digest,
        arguments_digest=ticket.edited_digest,
        edited_by=editor.get_username() if editor else None,
    )


def _redacted_items(
    edit: Edit | None, note_kinds: dict[str, int], value_kinds: dict[str, int]
) -> list[ev.Item]:
    edited_kinds = edit.redacted if edit else {}
    return [
        *ev.redacted("approver_note", note_kinds),
        *ev.redacted("answer", value_kinds),
        *ev.redacted("edited_arguments", edited_kinds),
    ]


def _uuid(raw: str) -> str | None:
    try:
        return str(uuid.UUID(raw))
    except (ValueError, TypeError, AttributeError):
        return None


def _apply(
    run: Run,
    ticket: Ticket,
    command: ResumeCommand,
    user: Any,
    edit: Edit | None,
    count: Count | None,
) -> None:
    """One decision event naming who answered; allow moves the call to executing before
    the tool runs (HITL-5); deny and input become the call's result. An allow of edited
    arguments carries them, so the run executes exactly those (HITL-12)."""
    now = timezone.now()
    who = user.get_username()
    decision = command.decision if command.answer == PERMISSION else INPUT
    # CG-11: what a person typed is stored and sent only redacted.
    note, note_kinds = redact(command.note)
    value, value_kinds = redact_value(command.value)
    items = _redacted_items(edit, note_kinds, value_kinds)
    decided = ev.TicketDecided(
        correlation_id=str(ticket.correlation_id),
        call_id=ticket.call_id,
        decision=decision or "",
        by=who,
        note=note,
    )
    invocation_changes: dict[str, Any] = {}
    if count is not None:  # an allow: who agreed, and what exactly they allowed
        decided = replace(
            decided,
            approvers=tuple(count.approvers),
            required=count.required,
            edit=_edit_record(ticket),
        )
        if ticket.edited_digest:
            decided = replace(decided, arguments=ticket.edited_arguments)
            invocation_changes = edited_invocation(run, ticket)
    items.append(decided.item())
    invocation_status = ToolInvocation.Status.EXECUTING
    result: dict[str, Any] | None = None
    if decision == ev.DENY:
        invocation_status = ToolInvocation.Status.DENIED
        said = f": {note}" if note else "."
        items.append(_result(ticket, ev.DENIED, f"Denied by approver {who}{said}"))
    elif decision == INPUT:
        invocation_status = ToolInvocation.Status.COMPLETED
        result = {"ok": True, "data": {"value": value}}
        items.append(_result(ticket, ev.OK, json.dumps(value, ensure_ascii=False)))
    ticket_resolve_answered(  # the run row lock makes this ours
        ticket.pk,
        now=now,
        by=user,
        resolution={
            "decision": decision,
            "note": note,
            "value": value,
            **({"approvers": count.approvers} if count else {}),
            **(edited.to_payload() if (edited := _edit_record(ticket)) else {}),
        },
    )
    invocation_settle(
        run.pk,
        ticket.call_id,
        status=invocation_status,
        result=result,
        completed_at=now if result else None,
        **invocation_changes,
    )
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
    try:
        ticket_resolve_expired(ticket.pk, now=now, resolution={"decision": ev.EXPIRED})
    except TicketRaced:  # answered, voided, or not past its deadline after all
        return False
    decided = ev.TicketDecided(
        correlation_id=str(ticket.correlation_id),
        call_id=ticket.call_id,
        decision=ev.EXPIRED,
        deadline=ticket.deadline.isoformat() if ticket.deadline else None,
    )
    content = "Expired: nobody answered before the deadline; treat this as a denial."
    append_events(
        thread_id=run.thread_id,
        run_id=run.pk,
        items=[decided.item(), _result(ticket, ev.EXPIRED, content)],
    )
    invocation_settle(
        run.pk, ticket.call_id, status=ToolInvocation.Status.EXPIRED, completed_at=now
    )
    if run.status == Run.Status.AWAITING:
        _requeue(run)
    return True


def ticket_expire_due(limit: int = 500) -> int:
    """The sweeper's share of HITL-7: each expired ticket in its own short transaction."""
    due = (
        Ticket.objects.filter(status=Ticket.Status.ACTIVE, deadline__lt=timezone.now())
        .exclude(kind=Ticket.Kind.TIMER)  # a timer's deadline is its due time (SCHED-3)
        .values_list("pk", flat=True)[:limit]
    )
    return sum(ticket_expire(ticket_id=pk) for pk in list(due))
