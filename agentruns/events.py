"""Event and result vocabularies: part of the API contract (§11)."""

from __future__ import annotations

from typing import Any

USER = "message.user"
ASSISTANT = "message.assistant"
TOOL_RESULT = "tool.result"
TICKET_OPENED = "ticket.opened"
TICKET_DECIDED = "ticket.decided"
CONTEXT_REFUSED = "context.refused"
CONTEXT_OBSERVED = "context.observed"
SOURCES_DROPPED = "sources.dropped"
SECRET_REDACTED = "secret.redacted"
MODE_SWITCHED = "mode.switched"
COMPACTION = "compaction"
RUN_COMPLETED = "run.completed"
RUN_FAILED = "run.failed"
RUN_CANCELLED = "run.cancelled"

TERMINAL_EVENTS = {RUN_COMPLETED: "completed", RUN_FAILED: "failed", RUN_CANCELLED: "cancelled"}

# tool.result statuses
OK = "ok"
ERROR = "error"
REFUSED = "refused"
DENIED = "denied"
EXPIRED = "expired"
UNCERTAIN = "uncertain"
NOT_PERMITTED = "not_permitted"
RESULT_STATUSES = (OK, ERROR, REFUSED, DENIED, EXPIRED, UNCERTAIN, NOT_PERMITTED)

# ticket.decided decisions (an expiry decides EXPIRED)
ALLOW = "allow"
DENY = "deny"


def result_item(
    call_id: str, tool: str, status: str, content: str, **extra: Any
) -> tuple[str, dict[str, Any]]:
    """The one shape of a `tool.result` event, whoever writes it (loop, resume, cancel)."""
    payload = {"call_id": call_id, "tool": tool, "status": status, "content": content}
    return TOOL_RESULT, {**payload, **extra}
