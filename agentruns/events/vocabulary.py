"""The event types and the values their payloads name: part of the API contract (§11)."""

from __future__ import annotations

from typing import Any

SUMMARY_CHARS = 160

USER = "message.user"
ASSISTANT = "message.assistant"
TOOL_RESULT = "tool.result"
TICKET_OPENED = "ticket.opened"
TICKET_DECIDED = "ticket.decided"
TICKET_APPROVED = "ticket.approved"  # HITL-13: one allow of several the quorum needs
TICKET_REMINDED = "ticket.reminded"
TICKET_ESCALATED = "ticket.escalated"
CONTEXT_REFUSED = "context.refused"
CONTEXT_OBSERVED = "context.observed"
SOURCES_DROPPED = "sources.dropped"
SECRET_REDACTED = "secret.redacted"
MODE_SWITCHED = "mode.switched"
COMPACTION = "compaction"
RUN_COMPLETED = "run.completed"
RUN_FAILED = "run.failed"
RUN_CANCELLED = "run.cancelled"
RUN_FORKED = "run.forked"
# DEL-1: a child run's log opens with who delegated it ({run, call_id}) and what it carries.
RUN_DELEGATED = "run.delegated"
# GOV-4: a replay's run opens with the run it re-runs ({run, at}), its replay, what it
# carries, and the original's recording: every tool result by tool name and arguments.
RUN_REPLAYED = "run.replayed"

EVENT_TYPES = (
    USER,
    ASSISTANT,
    TOOL_RESULT,
    TICKET_OPENED,
    TICKET_DECIDED,
    TICKET_APPROVED,
    TICKET_REMINDED,
    TICKET_ESCALATED,
    CONTEXT_REFUSED,
    CONTEXT_OBSERVED,
    SOURCES_DROPPED,
    SECRET_REDACTED,
    MODE_SWITCHED,
    COMPACTION,
    RUN_COMPLETED,
    RUN_FAILED,
    RUN_CANCELLED,
    RUN_FORKED,
    RUN_DELEGATED,
    RUN_REPLAYED,
)

# OPS-5: the events the audit export carries (beside the gate's rows). The log indexes them
# by time, and only them (models/runs.py `event_audit_time`).
AUDITED = (TICKET_DECIDED, TICKET_APPROVED, SECRET_REDACTED, RUN_CANCELLED)

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
DELEGATED = "delegated"  # DEL-1: a delegation ticket's decision, the child's end
TIMED = "timer"  # SCHED-3: a timer ticket's decision, by nobody

Payload = dict[str, Any]
Item = tuple[str, Payload]  # (type, payload): what an append or a step writes
