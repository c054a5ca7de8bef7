"""What the run page and the playground inspector show, folded from a run's log.

Plain functions over the run's events (and its tool-invocation rows for durations): the
timeline rows, where the time went, and the model turns with what each one carried and
what it used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from agentruns import events as ev
from agentruns.models import Checkpoint, Event, Run, Ticket, ToolInvocation
from agentruns.services.usage import Usage, turn_usage


@dataclass
class Row:
    sequence: int
    type: str
    summary: str
    payload: str
    created_at: datetime
    checkpoint: str = ""


def timeline(run: Run, events: list[Event]) -> list[Row]:
    """Every event in log order, with the checkpoint (if any) written at it (LOOP-8)."""
    marks = dict(
        Checkpoint.objects.filter(run=run)
        .order_by("last_sequence", "id")
        .values_list("last_sequence", "kind")
    )
    return [
        Row(
            sequence=e.sequence,
            type=e.type,
            summary=ev.summary(e.type, e.payload),
            payload=json.dumps(e.payload, indent=2, sort_keys=True, ensure_ascii=False),
            created_at=e.created_at,
            checkpoint=marks.get(e.sequence, ""),
        )
        for e in events
    ]


# Where the time between two consecutive events went, by the later one's type.
TIME_OF = {ev.ASSISTANT: "model", ev.TOOL_RESULT: "tools", ev.TICKET_DECIDED: "people"}
# The tickets nobody answers, by kind (DEL-1, SCHED-3); any other waits for people.
NOBODYS: dict[str, str] = {Ticket.Kind.DELEGATION: "children", Ticket.Kind.TIMER: "timer"}
TIME_LABELS = {
    "model": "Model",
    "tools": "Tools",
    "people": "Waiting for people",
    "children": "Waiting for child runs",
    "timer": "Waiting for its time",
    "other": "Queue and bookkeeping",
}


def time_split(run: Run, events: list[Event], now: datetime) -> list[dict[str, Any]]:
    """Seconds per phase from event timestamps; a wait still open counts until now. Every
    second a ticket is open is a wait, whatever the log records meanwhile (a reminder, an
    escalation, one approval of a quorum). Nobody answers a delegation ticket (DEL-1) or an
    `agent.wait` timer (SCHED-3): those are the wait for child runs and for its time, each
    its own line. The log has no claim timestamp, so a model reply's share includes any
    wait for a worker."""
    spent = dict.fromkeys(TIME_LABELS, 0.0)
    previous = run.created_at
    open_tickets: dict[str, str] = {}  # the wait each open ticket is, by call id
    for event in events:
        gap = max((event.created_at - previous).total_seconds(), 0.0)
        spent[_waiting(open_tickets) or TIME_OF.get(event.type, "other")] += gap
        if event.type in (ev.TICKET_OPENED, ev.TICKET_DECIDED):
            data = ev.parse(event.type, event.payload)
            if isinstance(data, ev.TicketOpened):
                open_tickets[data.call_id] = NOBODYS.get(data.kind, "people")
            elif isinstance(data, ev.TicketDecided):
                open_tickets.pop(data.call_id, None)
        previous = event.created_at
    if events and not run.is_terminal:
        gap = max((now - previous).total_seconds(), 0.0)
        spent[_waiting(open_tickets) or "other"] += gap
    total = sum(spent.values()) or 1.0
    return [
        {
            "key": key,
            "label": label,
            "seconds": round(spent[key], 3),
            "percent": round(100 * spent[key] / total, 1),
        }
        for key, label in TIME_LABELS.items()
    ]


def _waiting(open_tickets: dict[str, str]) -> str | None:
    """A person's ticket makes it people's time even beside one nobody answers, and a
    child's makes it the children's beside a timer's."""
    waits = set(open_tickets.values())
    return next((wait for wait in ("people", "children", "timer") if wait in waits), None)


@dataclass
class Call:
    id: str
    tool: str
    arguments: str
    status: str = "pending"
    result: str = ""
    duration_ms: int | None = None
    ticket: dict[str, Any] | None = None
    withheld: str = ""  # MCP-4: the class for which the next send withholds its result


@dataclass
class Turn:
    turn_index: int  # its place in its run
    sequence: int  # of its event in the thread's log
    text: str
    at: datetime
    usage: Usage = field(default_factory=Usage)  # OPS-1
    calls: list[Call] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    mode: str = ""
    # GOV-2: what the turn was sent under, from its own record (empty for older turns).
    # (As the page shows them: their stored shape, records' `to_payload()`.)
    sent: dict[str, Any] = field(default_factory=dict)
    served_by: dict[str, Any] = field(default_factory=dict)


def turns(run: Run, events: list[Event], withheld: dict[int, str] | None = None) -> list[Turn]:
    """Each model turn with its reply and its tool calls (status, result, duration from
    the invocation row, the approval wait if any, and, by the result's sequence in
    `withheld`, the class for which the next send withholds it)."""
    invocations = {i.call_id: i for i in ToolInvocation.objects.filter(run=run)}
    found: list[Turn] = []
    calls: dict[str, Call] = {}
    for event in events:
        data = ev.parse(event.type, event.payload)
        if isinstance(data, ev.AssistantMessage):
            turn = Turn(
                len(found) if data.turn_index is None else data.turn_index,
                event.sequence,
                data.text,
                event.created_at,
                turn_usage(data, run.configuration),
                sent=data.sent.to_payload() if data.sent else {},
                served_by=data.served_by.to_payload() if data.served_by else {},
            )
            for proposed in data.tool_calls:
                call = Call(proposed.id, proposed.name, _pretty(proposed.arguments))
                _timed(call, invocations.get(proposed.id))
                calls[call.id] = call
                turn.calls.append(call)
            found.append(turn)
        elif isinstance(data, ev.ToolResult) and data.call_id in calls:
            call = calls[data.call_id]
            call.status, call.result = data.status, data.content
            call.withheld = (withheld or {}).get(event.sequence, "")
        elif isinstance(data, ev.TicketOpened) and data.call_id in calls:
            calls[data.call_id].ticket = {**data.to_payload(), "open": True}
            calls[data.call_id].status = "awaiting"
        elif isinstance(data, ev.TicketDecided) and data.call_id in calls:
            call = calls[data.call_id]
            # A call that waited for a person ran from the decision on, not from its turn.
            _timed(call, invocations.get(call.id), since=event.created_at)
            ticket = call.ticket or {}
            ticket.update({"open": False, "decision": data, "said": ev.describe(data)})
    return found


def _timed(call: Call, invocation: ToolInvocation | None, since: datetime | None = None) -> None:
    if invocation and invocation.completed_at:
        took: timedelta = invocation.completed_at - max(
            since or invocation.created_at, invocation.created_at
        )
        call.duration_ms = max(round(took.total_seconds() * 1000), 0)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
