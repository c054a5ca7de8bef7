"""A stored event read as its record, and `LogEntry`, one event of a thread's log as the
loop and the store hold it in memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, overload

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
from agentruns.events.values import Event, RecordItem
from agentruns.events.vocabulary import EVENT_TYPES, Item

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
    data = payload if isinstance(payload, dict) else {}
    if record is None:
        return Other(kind, dict(data))
    return record.from_payload(data)


class _Parsed:
    """`LogEntry.data`: the payload's record, parsed on first reading and then kept in the
    entry (a non-data descriptor: the entry's own attribute shadows it from then on)."""

    @overload
    def __get__(self, entry: None, owner: type[LogEntry]) -> _Parsed: ...
    @overload
    def __get__(self, entry: LogEntry, owner: type[LogEntry]) -> Event: ...
    def __get__(self, entry: LogEntry | None, owner: type[LogEntry]) -> _Parsed | Event:
        if entry is None:
            return self
        data = entry.__dict__["data"] = parse(entry.type, entry.payload)
        return data


@dataclass(frozen=True)
class LogEntry:
    """One event of a thread's log: `payload` as stored, `data` its record (read once)."""

    sequence: int
    type: str
    payload: dict[str, Any]
    run_id: int | None = None

    data = _Parsed()  # not a field: derived from `type` and `payload`

    @classmethod
    def of(cls, sequence: int, event: Event, run_id: int | None = None) -> LogEntry:
        return cls.at(sequence, event.item(), run_id)

    @classmethod
    def at(cls, sequence: int, item: Item, run_id: int | None = None) -> LogEntry:
        """The entry an item becomes at `sequence`, with its record when it carries one."""
        kind, payload = item
        entry = cls(sequence, kind, payload, run_id)
        if isinstance(item, RecordItem):
            entry.__dict__["data"] = item.record  # what `data` would read back
        return entry
