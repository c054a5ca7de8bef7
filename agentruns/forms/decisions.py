"""A posted decision read into the resume service's command (UI-5, HITL-3).

The inbox card and the admin's ticket page post the same fields: the ticket's identity
exactly as the page showed it (hidden inputs, `TicketIdentity`), the button pressed and
the answer. Nothing here checks the identity against the ticket:
`services.resume.run_resume` does, in the spec's order, for the page exactly as for the
API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentruns import events as ev
from agentruns.errors import InvalidRequest
from agentruns.forms.questions import controls, value_from_post
from agentruns.models import Ticket, TicketIdentity
from agentruns.policy import four_eyes
from agentruns.services.resume import ResumeCommand

NOTE_MAX = 2000  # the API's limit on a note


def command_from_post(post: Mapping[str, Any], schema: dict[str, Any] | None) -> ResumeCommand:
    """`kind` says which form was sent (`Ticket.Answer`); `decision` is the button pressed
    (Approve/Deny)."""
    answer = str(post.get("kind", ""))
    decision = str(post.get("decision", "")) or None
    note = str(post.get("note", ""))
    if answer not in Ticket.Answer.values:
        raise InvalidRequest("The form did not say what kind of answer it is.")
    permission = answer == Ticket.Answer.PERMISSION
    if permission and decision not in (ev.ALLOW, ev.DENY):
        raise InvalidRequest("Press Approve or Deny.")
    if len(note) > NOTE_MAX:
        raise InvalidRequest(f"The note is longer than {NOTE_MAX} characters.")
    return ResumeCommand(
        identity=TicketIdentity.from_fields(post),
        answer=answer,
        decision=decision if permission else None,
        note=note if permission else "",
        value=None if permission else value_from_post(schema, post),
    )


def decision_context(
    user: Any,
    ticket: Ticket,
    *,
    typed: Mapping[str, str] | None = None,
    errors: Mapping[str, list[str]] | None = None,
) -> dict[str, Any]:
    """What a decision form shows `user` for `ticket`, on the inbox card and the admin's
    ticket page alike: the answer it takes, the identity to post back, a question's
    controls (holding what was typed and its errors), and four-eyes (HITL-8, UI-6)."""
    answer = ticket.answer
    question = answer == Ticket.Answer.INPUT
    return {
        "answer": answer,
        "identity": ticket.identity.as_dict(),
        "controls": controls(ticket.schema, typed, errors) if question else [],
        "four_eyes": four_eyes(user, ticket.run),
    }
