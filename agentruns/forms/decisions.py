"""A posted decision read into the resume service's command (UI-5, HITL-3).

The inbox card and the admin's ticket page post the same fields: the ticket's identity
exactly as the page showed it (hidden inputs), the button pressed and the answer. Nothing
here checks the identity against the ticket: `services.resume.run_resume` does, in the
spec's order, for the page exactly as for the API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentruns.errors import InvalidRequest
from agentruns.forms.questions import value_from_post
from agentruns.models import Ticket
from agentruns.services.resume import ALLOW, DENY, INPUT, PERMISSION, ResumeCommand

IDENTITY = ("correlation_id", "run", "snapshot_id", "catalog_fingerprint", "call_id")
NOTE_MAX = 2000  # the API's limit on a note


def identity_fields(ticket: Ticket) -> dict[str, Any]:
    """The hidden inputs of a card: the identity fields the API shows, verbatim."""
    return {
        "correlation_id": str(ticket.correlation_id),
        "run": ticket.run_id,
        "snapshot_id": ticket.snapshot_id,
        "catalog_fingerprint": ticket.catalog_fingerprint,
        "call_id": ticket.call_id,
    }


def command_from_post(post: Mapping[str, Any], schema: dict[str, Any] | None) -> ResumeCommand:
    """`kind` says which form was sent; `decision` is the button pressed (Approve/Deny)."""
    kind = str(post.get("kind", ""))
    decision = str(post.get("decision", "")) or None
    note = str(post.get("note", ""))
    if kind not in (PERMISSION, INPUT):
        raise InvalidRequest("The form did not say what kind of answer it is.")
    if kind == PERMISSION and decision not in (ALLOW, DENY):
        raise InvalidRequest("Press Approve or Deny.")
    if len(note) > NOTE_MAX:
        raise InvalidRequest(f"The note is longer than {NOTE_MAX} characters.")
    return ResumeCommand(
        correlation_id=str(post.get("correlation_id", "")),
        run=_integer(post.get("run")),
        snapshot_id=str(post.get("snapshot_id", "")),
        catalog_fingerprint=str(post.get("catalog_fingerprint", "")),
        call_id=str(post.get("call_id", "")),
        kind=kind,
        decision=decision if kind == PERMISSION else None,
        note=note if kind == PERMISSION else "",
        value=value_from_post(schema, post) if kind == INPUT else None,
    )


def _integer(raw: Any) -> int:
    # A run id that is not a number names no run: the service answers `run_mismatch`.
    try:
        return int(str(raw))
    except ValueError:
        return -1
