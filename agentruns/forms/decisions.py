"""A posted decision read into the resume service's command (UI-5, HITL-3, HITL-12).

The inbox card and the admin's ticket page post the same fields: the ticket's identity
exactly as the page showed it (hidden inputs, `TicketIdentity`), the button pressed and
the answer; the *Edit arguments* form adds `edit`, the ticket's tool and the arguments as
fields generated from the tool's schema. Nothing here checks the identity, the tool or the
arguments against the ticket: `services.resume.run_resume` does, in the spec's order, for
the page exactly as for the API.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentruns import events as ev
from agentruns.errors import InvalidRequest
from agentruns.forms.questions import controls, typed_from_value, unplaced_errors, value_from_post
from agentruns.models import Ticket, TicketIdentity
from agentruns.policy import four_eyes
from agentruns.services.approvals import approval_count, edit_schema
from agentruns.services.resume import ResumeCommand

NOTE_MAX = 2000  # the API's limit on a note
ARGUMENTS = "arguments"  # the prefix of the edit form's fields


def command_from_post(post: Mapping[str, Any], ticket: Ticket) -> ResumeCommand:
    """`kind` says which form was sent (`Ticket.Answer`); `decision` is the button pressed
    (Approve/Deny); `edit` marks the Edit arguments form, an allow of what it holds."""
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
    edited = permission and bool(post.get("edit"))
    arguments = value_from_post(edit_schema(ticket), post, prefix=ARGUMENTS) if edited else None
    return ResumeCommand(
        identity=TicketIdentity.from_fields(post),
        answer=answer,
        decision=decision if permission else None,
        note=note if permission else "",
        value=None if permission else value_from_post(ticket.schema, post),
        arguments=arguments,
        tool=(str(post.get("tool", "")) or None) if edited else None,
        arguments_digest=(str(post.get("arguments_digest", "")) or None) if permission else None,
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
    controls or the Edit arguments controls (holding what was typed and its errors),
    four-eyes (HITL-8, UI-6) and where the quorum stands (HITL-13)."""
    answer = ticket.answer
    question = answer == Ticket.Answer.INPUT
    schema = None if question else edit_schema(ticket)
    if schema is not None and typed is None:
        typed = typed_from_value(schema, ticket.pending_arguments, prefix=ARGUMENTS)
    edit_controls = controls(schema, typed, errors, prefix=ARGUMENTS) if schema else []
    question_controls = controls(ticket.schema, typed, errors) if question else []
    # HITL-13: with one approval needed the first allow answers: no count to show.
    quorum = not question and ticket.run.configuration.approvals_required > 1
    count = approval_count(ticket.run, ticket) if quorum else None
    return {
        "answer": answer,
        "identity": ticket.identity.as_dict(),
        "controls": question_controls,
        "edit_controls": edit_controls,
        "editing": bool(errors) and not question,
        "form_errors": unplaced_errors(question_controls + edit_controls, errors or {}),
        "four_eyes": four_eyes(user, ticket.run),
        "approvals": count,
        "approved_by_you": count is not None and user.get_username() in count.approvers,
        "pending_arguments": _shown(ticket.pending_arguments),
        "original_arguments": _shown(ticket.arguments) if ticket.edited_digest else "",
    }


def _shown(arguments: Any) -> str:
    return json.dumps(arguments or {}, indent=2, ensure_ascii=False)
