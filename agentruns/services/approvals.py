"""Edit before approving (HITL-12) and quorum (HITL-13): what an allow approves and whether
it is the allow that releases the call.

Both run inside the resume service's transaction, under the run's row lock: concurrent
allows are therefore counted one after the other, and exactly the one that completes the
quorum answers the ticket; the others either add their count or find the ticket answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentruns.answers import bounds_problem, field_errors
from agentruns.errors import AlreadyApproved, ArgumentsChanged, InvalidArguments
from agentruns.models import Run, Ticket, TicketApproval, ToolInvocation
from agentruns.policy import four_eyes_counted, may_decide
from agentruns.runtime.effects import idempotency_key
from agentruns.runtime.redaction import redact_value
from agentruns.runtime.state import ProposedCall
from agentruns.store.tickets import ticket_edit
from agentruns.tools.registry import REGISTRY, digest


@dataclass(frozen=True)
class Edit:
    """Arguments an approver typed, redacted (CG-11) and valid for the ticket's tool."""

    arguments: dict[str, Any]
    digest: str
    redacted: dict[str, int]  # what redaction replaced, by kind (CG-11)


def edit_checked(
    ticket: Ticket, *, decision: str | None, tool: str | None, arguments: Any
) -> Edit | None:
    """HITL-12: None when the answer edits nothing; else the edit, or `invalid_arguments`.
    The ticket names the call and its tool; an answer may change the arguments only."""
    if tool not in (None, "", ticket.tool):
        raise InvalidArguments(
            "An edit may change the call's arguments, never which tool runs.",
            fields={"tool": [f"This ticket is for {ticket.tool!r}; it cannot run {tool!r}."]},
        )
    if arguments is None:
        return None
    if decision != "allow":
        raise InvalidArguments("Only an allow may carry edited arguments.")
    if not isinstance(arguments, dict):
        raise InvalidArguments("The arguments are an object.", fields={"": ["Give an object."]})
    too_big = bounds_problem(arguments)  # SEC-18: before redaction and validation walk it
    if too_big:
        raise InvalidArguments(f"The arguments are refused: {too_big}.", fields={"": [too_big]})
    registered = REGISTRY.get(ticket.tool)
    if registered is None:
        raise InvalidArguments(f"{ticket.tool!r} is no longer registered; it cannot be edited.")
    # SEC-4: what is stored and run is the redacted value, so that is what must fit.
    value, kinds = redact_value(arguments)
    errors = field_errors(registered.validator, value)
    if errors:
        raise InvalidArguments("The edited arguments do not fit the tool's schema.", fields=errors)
    return Edit(value, digest(value), kinds)


def edit_schema(ticket: Ticket) -> dict[str, Any] | None:
    """The schema an edit of this ticket's arguments must fit: its own tool's, live."""
    if ticket.kind != Ticket.Kind.TOOL_PERMISSION:
        return None
    registered = REGISTRY.get(ticket.tool)
    return registered.parameters if registered else None


def approval_refusal(ticket: Ticket, user: Any, edit: Edit | None, shown: str | None) -> None:
    """HITL-13, SEC-16: an allow approves the arguments its approver was shown (`shown`,
    their digest), and the same person never counts twice for them. Once the arguments
    were edited the digest is required: without it nothing says which version the
    approver read, and an allow sent as if for the model's arguments would run the edit."""
    if (shown or ticket.edited_digest) and shown != ticket.pending_digest:
        raise ArgumentsChanged(
            "The arguments were edited since they were shown to you; read the ticket "
            "again and send its arguments_digest."
        )
    approving = edit.digest if edit else ticket.pending_digest
    if TicketApproval.objects.filter(ticket=ticket, user=user, arguments_digest=approving).exists():
        raise AlreadyApproved("You already approved this call with these arguments.")


@dataclass(frozen=True)
class Count:
    """Where the quorum stands after this allow; `dropped` are those whose allow no longer
    counts (SEC-17)."""

    approvers: list[str]
    required: int
    dropped: list[str] = field(default_factory=list)

    @property
    def reached(self) -> bool:
        return len(self.approvers) >= self.required


def approval_record(run: Run, ticket: Ticket, user: Any, edit: Edit | None) -> Count:
    """Record the allow for the arguments it approves. An edit to new arguments makes them
    the ticket's pending arguments: the count restarts for them (HITL-13)."""
    if edit is not None and edit.digest != ticket.pending_digest:
        back_to_original = edit.digest == ticket.arguments_digest
        ticket.edited_arguments = None if back_to_original else edit.arguments
        ticket.edited_digest = "" if back_to_original else edit.digest
        ticket.edited_by = None if back_to_original else user
        ticket_edit(  # the run row lock makes this ours
            ticket.pk,
            arguments=ticket.edited_arguments,
            digest=ticket.edited_digest,
            by=ticket.edited_by,
        )
    TicketApproval.objects.create(ticket=ticket, user=user, arguments_digest=ticket.pending_digest)
    return approval_count(run, ticket)


def approval_count(run: Run, ticket: Ticket) -> Count:
    """The distinct people who allowed the pending arguments; under four-eyes the
    initiator never counts (HITL-8), even had they allowed before it was switched on.
    SEC-17: an allow counts only while its giver may still decide the ticket, asked now:
    an account deactivated, or one that lost `approve_run` or left the routing groups
    since, is dropped from the count (and named, so the card can say so)."""
    required = run.configuration.approvals_required
    if ticket.status != Ticket.Status.ACTIVE:
        return Count([], required)
    rows = TicketApproval.objects.filter(
        four_eyes_counted(run), ticket=ticket, arguments_digest=ticket.pending_digest
    )
    counted: list[str] = []
    dropped: list[str] = []
    for row in rows.select_related("user"):
        live = row.user.is_active and may_decide(row.user, ticket)
        (counted if live else dropped).append(row.user.get_username())
    return Count(counted, required, dropped)


def edited_invocation(run: Run, ticket: Ticket) -> dict[str, Any]:
    """HITL-12: the invocation row carries the arguments that will run, with their digest
    and idempotency key, committed with the decision before the tool can run."""
    if not ticket.edited_digest:
        return {}
    invocation = ToolInvocation.objects.filter(run=run, call_id=ticket.call_id).first()
    registered = REGISTRY.get(ticket.tool)
    if invocation is None:
        return {}
    call = ProposedCall(ticket.call_id, ticket.tool, ticket.edited_arguments)
    return {
        "arguments": ticket.edited_arguments,
        "arguments_digest": ticket.edited_digest,
        "idempotency_key": idempotency_key(run.pk, invocation.turn_index, call, registered),
    }
