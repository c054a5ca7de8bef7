"""A stored event read as its record, and `LogEntry`, one event of a thread's log as the
loop and the store hold it in memory."""

from __future__ import annotations

from dataclasses import dataclass, field
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
from agentruns.events.values import Event, RecordItem
from agentruns.events.vocabulary import EVENT_TYPES, Item
from agentruns.frozen import quick

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


# A log entry's `data` before it is parsed: never seen outside `LogEntry.__post_init__`.
_UNPARSED = Other("", {})


@quick
@dataclass(frozen=True, slots=True)
class LogEntry:
    """One event of a thread's log: `payload` as stored, `data` its record. An entry made
    of a record keeps it (`LogEntry.at`); one read from the store parses its payload once,
    as it is made. `data` is a slot, not a parse-on-first-read descriptor that kept the
    record in the instance's dictionary: that dictionary, there for some entries and not
    others, made the interpreter give up specialising every read of an entry's fields
    (PERF-1)."""

    sequence: int
    type: str
    payload: dict[str, Any]
    run_id: int | None = None
    data: Event = field(default=_UNPARSED, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.data is _UNPARSED:
            object.__setattr__(self, "data", parse(self.type, self.payload))

    @classmethod
    def of(cls, sequence: int, event: Event, run_id: int | None = None) -> LogEntry:
        return cls.at(sequence, event.item(), run_id)

    @classmethod
    def at(cls, sequence: int, item: Item, run_id: int | None = None) -> LogEntry:
        """The entry an item becomes at `sequence`, with its record when it carries one."""
        kind, payload = item
        if isinstance(item, RecordItem):
            return cls(sequence, kind, payload, run_id, item.record)
        return cls(sequence, kind, payload, run_id)
