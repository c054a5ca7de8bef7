"""GOV-3 in the inbox: one card per held catalog change for holders of approve_change,
with its diff as they may read it; Approve and Reject post to the service the API uses."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from agentruns.errors import AgentrunsError
from agentruns.policy import may_decide_changes, pending_changes, visible_changes
from agentruns.services.changes import change_request_approve, change_request_reject, text_diffs
from agentruns.words import sentence


def change_cards(user: Any) -> list[dict[str, Any]]:
    """The pending change requests, oldest first (the longest waiting on top)."""
    cards = []
    for request in pending_changes(user).select_related("requested_by").order_by("id")[:100]:
        changes = visible_changes(user, request.kind, request.changes)
        cards.append(
            {
                "request": request,
                "changes": changes,
                "diffs": text_diffs(changes),
                "own": request.requested_by_id == user.pk,
            }
        )
    return cards


@login_required
@require_POST
def decide(request: HttpRequest, request_id: int) -> HttpResponse:
    if not may_decide_changes(request.user):
        raise PermissionDenied
    approve = request.POST.get("action") == "approve"
    decide = change_request_approve if approve else change_request_reject
    try:
        decided = decide(request_id=request_id, user=request.user)
    except AgentrunsError as exc:
        messages.error(request, sentence(exc))
    else:
        messages.success(request, f"Change request #{decided.pk} {decided.status}.")
    return redirect("playground:inbox")
