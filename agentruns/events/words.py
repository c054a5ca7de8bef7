"""Each event in one line of words, the same in the admin's timeline and on the run page."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agentruns.events.log import (
    parse,
)
from agentruns.events.records import (
    AssistantMessage,
    Failure,
    RunCompleted,
    RunDelegated,
    RunForked,
    RunReplayed,
    ToolResult,
    UserMessage,
)
from agentruns.events.tickets import (
    TicketApproved,
    TicketDecided,
    TicketEscalated,
    TicketOpened,
    TicketReminded,
)
from agentruns.events.values import (
    Event,
)
from agentruns.events.vocabulary import (
    DELEGATED,
    EXPIRED,
    SUMMARY_CHARS,
    TIMED,
)


def _when(moment: str | None) -> str:
    """An ISO timestamp as people read it; a log written before deadlines were recorded
    has none, and one that is no timestamp is shown as stored."""
    if not moment:
        return "the deadline"
    try:
        return datetime.fromisoformat(moment).strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    except ValueError:
        return moment


def sent_under(turn: AssistantMessage) -> str:
    """GOV-2: a model turn's own record of where it went and under which versions, in
    words ("" for a turn logged before turns kept one)."""
    sent, served = turn.sent, turn.served_by
    if sent is None:
        return ""
    provider = served.provider if served else None
    words = (
        f"sent to {provider or 'no provider'} v{sent.provider_version} "
        f"({sent.zone or None}, ceiling {sent.ceiling or None}) under "
        f"{served.configuration if served else None} v{sent.link_version}"
    )
    if sent.sources:
        words += "; " + ", ".join(f"{name} v{version}" for name, version in sent.sources.items())
    if sent.withheld:
        words += "; withheld results #" + ", #".join(str(seq) for seq in sent.withheld)
    return words


def summary(kind: str, payload: Mapping[str, Any]) -> str:
    """One line per event, the same words in the admin's timeline and on the run page."""
    return describe(parse(kind, payload))


def describe(event: Event) -> str:
    """`summary` of a record."""
    match event:
        case AssistantMessage():
            calls = ", ".join(c.name for c in event.tool_calls)
            text = event.text[:120]
            text = f"{text} [calls: {calls}]" if calls else text
            sent = sent_under(event)
            return f"{text} ({sent})" if sent else text
        case ToolResult():
            content = event.content[:120]
            return f"{event.tool} {event.call_id} {event.status}: {content}"
        case UserMessage():
            return event.text[:SUMMARY_CHARS]
        case TicketOpened():
            return f"waiting: {event.kind} {event.tool}".strip()
        case TicketDecided():
            return _decided(event)
        case TicketApproved():
            count = f"{event.approvals} of {event.required}"
            return f"approval {count} by {event.by}"[:SUMMARY_CHARS]
        case TicketEscalated():
            return f"escalated to {event.group}: {event.tool}".strip(" :")
        case TicketReminded():
            return f"approvers reminded: {event.kind} {event.tool}".strip()
        case RunCompleted():
            return event.final_reply[:SUMMARY_CHARS]
        case RunForked():
            return _forked(event)
        case RunDelegated():
            return f"delegated by run #{event.parent_run} ({event.parent_call_id})"
        case RunReplayed():
            return (
                f"replay #{event.replay} of run #{event.original} on {event.configuration}: "
                f"its {len(event.recording)} recorded tool results answer the calls"
            )
        case Failure():
            return (event.code or "") + " " + event.detail[:200]
    return json.dumps(event.to_payload())[:200]


def _forked(event: RunForked) -> str:
    origin = event.forked_from
    carried = len(event.carried)
    words = (
        f"forked from run #{origin.get('run')} at event #{origin.get('at')} on "
        f"{event.configuration}, carrying {carried} source{'' if carried == 1 else 's'}"
    )
    if event.floor:
        words += f"; held to run #{event.floor.get('run')}'s floor ({event.floor.get('class')})"
    return words


def _decided(event: TicketDecided) -> str:
    if event.decision == EXPIRED:
        return f"expired (no decision by {_when(event.deadline)})"
    if event.decision == DELEGATED:
        return f"child run #{event.child} ended: its result is the call's"
    if event.decision == TIMED:
        return "its time came"
    note = f": {event.note}" if event.note else ""
    return f"{event.decision} by {event.by}{note}"[:SUMMARY_CHARS]
