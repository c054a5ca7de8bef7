"""Event and result vocabularies: part of the API contract (§11); and `LogEntry`, one
event of a thread's log as the loop and the store hold it in memory (the table's row is
`models.Event`; this module is imported as `ev` for its vocabulary)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
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
)

# OPS-5: the events the audit export carries (beside the gate's rows). The log indexes them
# by time, and only them (models/runs.py `event_audit_time`).
AUDITED = (TICKET_DECIDED, TICKET_APPROVED, SECRET_REDACTED, RUN_CANCELLED)


@dataclass(frozen=True)
class LogEntry:
    sequence: int
    type: str
    payload: dict[str, Any]
    run_id: int | None = None


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


def result_item(
    call_id: str, tool: str, status: str, content: str, **extra: Any
) -> tuple[str, dict[str, Any]]:
    """The one shape of a `tool.result` event, whoever writes it (loop, resume, cancel)."""
    payload = {"call_id": call_id, "tool": tool, "status": status, "content": content}
    return TOOL_RESULT, {**payload, **extra}


def _when(moment: str | None) -> str:
    """An ISO timestamp as people read it; a log written before deadlines were recorded
    has none."""
    if not moment:
        return "the deadline"
    return datetime.fromisoformat(moment).strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def sent_under(payload: dict[str, Any]) -> str:
    """GOV-2: a model turn's own record of where it went and under which versions, in
    words ("" for a turn logged before turns kept one)."""
    sent, served = payload.get("sent") or {}, payload.get("served_by") or {}
    if not sent:
        return ""
    words = (
        f"sent to {served.get('provider') or 'no provider'} v{sent.get('provider_version')} "
        f"({sent.get('zone')}, ceiling {sent.get('ceiling')}) under "
        f"{served.get('configuration')} v{sent.get('link_version')}"
    )
    sources = sent.get("sources") or {}
    if sources:
        words += "; " + ", ".join(f"{name} v{version}" for name, version in sources.items())
    withheld = sent.get("withheld") or []
    if withheld:
        words += "; withheld results #" + ", #".join(str(seq) for seq in withheld)
    return words


def summary(kind: str, payload: dict[str, Any]) -> str:
    """One line per event, the same words in the admin's timeline and on the run page."""
    if kind == ASSISTANT:
        calls = ", ".join(c["name"] for c in payload.get("tool_calls", []))
        text = (payload.get("text") or "")[:120]
        text = f"{text} [calls: {calls}]" if calls else text
        sent = sent_under(payload)
        return f"{text} ({sent})" if sent else text
    if kind == TOOL_RESULT:
        content = str(payload.get("content", ""))[:120]
        return f"{payload.get('tool')} {payload.get('call_id')} {payload.get('status')}: {content}"
    if kind == USER:
        return str(payload.get("text", ""))[:SUMMARY_CHARS]
    if kind == TICKET_OPENED:
        return f"waiting: {payload.get('kind')} {payload.get('tool', '')}".strip()
    if kind == TICKET_DECIDED and payload.get("decision") == EXPIRED:
        return f"expired (no decision by {_when(payload.get('deadline'))})"
    if kind == TICKET_DECIDED and payload.get("decision") == DELEGATED:
        return f"child run #{payload.get('child')} ended: its result is the call's"
    if kind == TICKET_DECIDED and payload.get("decision") == TIMED:
        return "its time came"
    if kind == TICKET_DECIDED:
        note = f": {payload['note']}" if payload.get("note") else ""
        return f"{payload.get('decision')} by {payload.get('by')}{note}"[:SUMMARY_CHARS]
    if kind == TICKET_APPROVED:
        count = f"{payload.get('approvals')} of {payload.get('required')}"
        return f"approval {count} by {payload.get('by')}"[:SUMMARY_CHARS]
    if kind == TICKET_REMINDED:
        return f"approvers reminded: {payload.get('kind')} {payload.get('tool', '')}".strip()
    if kind == TICKET_ESCALATED:
        return f"escalated to {payload.get('group')}: {payload.get('tool', '')}".strip(" :")
    if kind == RUN_COMPLETED:
        return str(payload.get("final_reply", ""))[:SUMMARY_CHARS]
    if kind == RUN_DELEGATED:
        parent = payload.get("delegated_by") or {}
        return f"delegated by run #{parent.get('run')} ({parent.get('call_id')})"
    if kind in (RUN_FAILED, CONTEXT_REFUSED):
        return str(payload.get("code") or "") + " " + str(payload.get("detail", ""))[:200]
    return json.dumps(payload)[:200]
