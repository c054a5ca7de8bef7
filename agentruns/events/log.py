"""A stored event read as its record, and `LogEntry`, one event of a thread's log as the
loop and the store hold it in memory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from agentruns.events.records import (
    AssistantMessage,
    Compaction,
    ContextObserved,
    ContextRefused,
    ModeSwitched,
    Other,
    RunCancelled,
    RunCompleted,
    RunDelegated,
    RunFailed,
    RunForked,
    RunReplayed,
    SecretRedacted,
    SourcesDropped,
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
    EVENT_TYPES,
)

RECORDS: dict[str, type[Event]] = {
    record.TYPE: record
    for record in (
        UserMessage,
        AssistantMessage,
        ToolResult,
        TicketOpened,
        TicketDecided,
        TicketApproved,
        TicketReminded,
        TicketEscalated,
        ContextRefused,
        ContextObserved,
        SourcesDropped,
        SecretRedacted,
        ModeSwitched,
        Compaction,
        RunCompleted,
        RunFailed,
        RunCancelled,
        RunForked,
        RunDelegated,
        RunReplayed,
    )
}
assert set(RECORDS) == set(EVENT_TYPES), "every event type has its record"


def parse(kind: str, payload: object) -> Event:
    """A stored event as its record; never raises (see the module's docstring)."""
    record = RECORDS.get(kind)
    data = payload if isinstance(payload, Mapping) else {}
    if record is None:
        return Other(kind, dict(data))
    return record.from_payload(data)


@dataclass(frozen=True)
class LogEntry:
    """One event of a thread's log: `payload` as stored, `data` its record (read once)."""

    sequence: int
    type: str
    payload: dict[str, Any]
    run_id: int | None = None

    @cached_property
    def data(self) -> Event:
        return parse(self.type, self.payload)

    @classmethod
    def of(cls, sequence: int, event: Event, run_id: int | None = None) -> LogEntry:
        kind, payload = event.item()
        entry = cls(sequence, kind, payload, run_id)
        entry.__dict__["data"] = event  # what `data` would read back
        return entry
