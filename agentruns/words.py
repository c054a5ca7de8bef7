"""The one place an error code becomes the sentence a page shows (the API keeps the codes).

Pages catch `AgentrunsError` from the services and call `sentence(error)`; a code without
words here falls back to the error's own detail, so nothing fails silently.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import formats, timezone

from agentruns import events as ev
from agentruns.errors import AgentrunsError
from agentruns.models import Ticket
from agentruns.policy import is_approver
from agentruns.services.resume import ResumeCommand

WORDS: dict[str, str] = {
    # Requests.
    "invalid": "Some of what was sent is not valid; see the fields below.",
    "not_found": "That does not exist, or you may not see it.",
    "conflict": "That cannot be done now: the run changed in the meantime.",
    "not_permitted": "You do not have permission to do that.",
    "invalid_idempotency_key": (
        "Nothing was started: the Idempotency-Key is too long or holds characters it may "
        "not (at most 200 printable ASCII characters)."
    ),
    "mcp_unavailable": "The MCP server could not be asked for its tools; nothing changed.",
    # CG-7, CG-8.
    "context_refused": (
        "The context gate refused this run: a source is classified above what the "
        "provider's zone may receive."
    ),
    "fenced": "Another worker took over this run; nothing was written.",
    # HITL-3, in the order the resume service checks them. Each says that nothing changed
    # (HITL-4) and why, since the person may press again.
    "not_awaiting": (
        "Nothing was changed: the run is no longer waiting for an answer; it was already "
        "answered, or cancelled."
    ),
    "correlation_mismatch": (
        "Nothing was changed: this form belongs to an earlier wait of the run, which has "
        "moved on. Answer the card the inbox shows now."
    ),
    "run_mismatch": "Nothing was changed: the form names another run than its ticket's.",
    "snapshot_mismatch": (
        "Nothing was changed: the form's configuration snapshot is not the one this ticket "
        "was opened under (the form was edited, or is from another wait)."
    ),
    "catalog_mismatch": (
        "Nothing was changed: the form's tool catalog fingerprint is not the one this "
        "ticket was opened under (the form was edited, or is from another wait)."
    ),
    "expired": (
        "Nothing was changed: the deadline passed before the answer arrived, and the run "
        "went on as if the call was denied."
    ),
    "result_kind_mismatch": (
        "Nothing was changed: this ticket takes another kind of answer (an approval, or a "
        "typed answer to a question)."
    ),
    "call_mismatch": (
        "Nothing was changed: the form names another tool call than the one this ticket waits for."
    ),
    "invalid_input": (
        "Nothing was sent: the answer does not fit the question; see the marked fields."
    ),
    "invalid_arguments": (
        "Nothing was approved: the edited arguments do not fit the tool's schema, or name "
        "another tool; see the marked fields."
    ),
    "self_approval": (
        "Nothing was approved: four-eyes. You started this run, and its configuration needs "
        "a second person to approve its tool calls; ask another approver (you may deny)."
    ),
    "already_approved": (
        "Nothing was changed: your approval of these arguments is already counted; the "
        "call waits for another approver."
    ),
    "arguments_changed": (
        "Nothing was approved: another approver changed the arguments since this page was "
        "shown. Read them again on the card as it is now."
    ),
    # SEC-14: the same per-person rates as the API.
    "throttled": (
        "Nothing was done: you have started or answered runs too often in a short time. "
        "Wait a little and send it again."
    ),
    # SCHED-4: a trigger's request (the API answers it; no page sends one).
    "bad_signature": (
        "Nothing was started: the request's signature is missing, stale or does not match "
        "its body and timestamp."
    ),
    "payload_too_large": "Nothing was done: what was sent is too large.",
    # UI-5: Django's CSRF check refused the post before any view saw it.
    "csrf_failed": (
        "Nothing was decided: the form came without this site's security token (CSRF), so "
        "it may not have been sent from this site's own page. Open the page again and send "
        "the form from there; if cookies are blocked, allow them for this site."
    ),
    # OPS-2.
    "daily_limit_reached": (
        "Nothing was started: this configuration has used its tokens for today (UTC); try "
        "again tomorrow or ask an operator to raise its daily limit."
    ),
}


def sentence(error: AgentrunsError) -> str:
    """The words for an error; the detail is added when it says more than the code and no
    per-field messages say it beside their fields (the words then point at them)."""
    words = WORDS.get(error.code)
    if words is None:
        return error.detail
    if error.detail and error.detail != error.code and not field_errors(error):
        return f"{words} ({error.detail})"
    return words


def field_errors(error: AgentrunsError) -> dict[str, list[str]]:
    """Per-field messages an `invalid`/`invalid_input` error carries, for form display."""
    fields = error.fields.get("fields") or {}
    return {str(name): [str(m) for m in msgs] for name, msgs in fields.items()}


DONE = {"allow": "approved", "deny": "denied", "input": "answered", "delegated": "answered"}

# DEL-3: why a configuration's delegates were refused on save (admin and API alike).
DELEGATION_CYCLE = (
    "These delegates would let the configuration reach itself through delegation; "
    "remove the one that leads back to it."
)


def decided_sentence(command: ResumeCommand, ticket: Ticket) -> str:
    """What a successful post did, in the words of the button pressed."""
    where = f"run #{ticket.run_id}"
    if command.answer == Ticket.Answer.INPUT:
        return f"Answer sent: {where} goes on with it."
    edited = " with your edited arguments" if command.arguments is not None else ""
    if command.decision == ev.ALLOW and ticket.status == Ticket.Status.ACTIVE:
        # HITL-13: counted, and the quorum is not reached yet.
        return (
            f"Approval counted: {ticket.tool} on {where}{edited} waits for "
            f"{ticket.run.configuration.approvals_required} approvals in all."
        )
    if command.decision == ev.ALLOW:
        return f"Approved: {ticket.tool} on {where}{edited}; the run goes on and makes the call."
    note = ", with your note" if command.note else ""
    return f"Denied: {ticket.tool} on {where} will not run; the model is told{note}."


def when(moment: datetime | None) -> str:
    """UI-7: a time in the one format the admin and the templates use, with its zone."""
    if moment is None:
        return ""
    return formats.date_format(timezone.localtime(moment), "DATETIME_FORMAT")


def ticket_outcome(ticket: Ticket, user: Any) -> str:
    """What became of a ticket that is not (or no longer) on this viewer's card."""
    at = when(ticket.resolved_at)
    if ticket.status == Ticket.Status.EXPIRED:
        return f"It expired at {at} and counted as a denial; the run went on."
    if ticket.status == Ticket.Status.VOID:
        return "The run was cancelled, so nobody needs to answer any more."
    if ticket.status == Ticket.Status.ANSWERED:
        who = ticket.resolved_by
        by = who.get_username() if who else "someone"
        if who is not None and who.pk == user.pk:
            by = "you"
        decision = (ticket.resolution or {}).get("decision", "")
        done = DONE.get(decision, "answered")
        return f"It was {done} by {by} at {at}."
    return _waits_for(ticket, user)


def _waits_for(ticket: Ticket, user: Any) -> str:
    """An open ticket this viewer may not decide: routing's reason (HITL-14) when it is
    routed, else the permission (HITL-9)."""
    configuration = ticket.run.configuration
    groups = ", ".join(sorted(configuration.approver_groups.values_list("name", flat=True)))
    if not groups:
        return "It waits for someone who may decide it: an approver (approve_run)."
    escalation = configuration.escalation_group
    later = f", and once 80 % of its time has passed, of {escalation.name}" if escalation else ""
    routed = f"It is routed to the approvers (approve_run) of {groups}{later}."
    if is_approver(user):
        return f"{routed} You are an approver but not one of them, so you may not decide it."
    return routed


def failure_sentence(failure: dict) -> str:
    """A failed run's `failure` ({code, detail, …}) in words; CG-7's detail is the
    refusal message itself, naming the source and the remedies, never its text."""
    code, detail = str(failure.get("code", "")), str(failure.get("detail", ""))
    words = WORDS.get(code, "")
    return " ".join(part for part in (words, detail) if part and part != code) or code
