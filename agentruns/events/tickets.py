"""The records of a ticket's life (HITL): opened, approved by one of a quorum, reminded or
escalated, decided."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from agentruns.events.values import (
    EditRecord,
    Event,
    _int,
    _opt_dict,
    _opt_int,
    _opt_str,
    _opt_strs,
    _str,
    _strs,
)
from agentruns.events.vocabulary import (
    EXPIRED,
    TICKET_APPROVED,
    TICKET_DECIDED,
    TICKET_ESCALATED,
    TICKET_OPENED,
    TICKET_REMINDED,
    Payload,
)
from agentruns.frozen import quick


@quick
@dataclass(frozen=True, slots=True)
class TicketOpened(Event):
    """HITL-1: a run parked on a ticket; a delegation's names its `child` (DEL-1)."""

    TYPE: ClassVar[str] = TICKET_OPENED
    correlation_id: str
    call_id: str
    kind: str  # the ticket's
    tool: str
    deadline: str | None
    child: int | None = None

    def to_payload(self) -> Payload:
        payload: Payload = {
            "correlation_id": self.correlation_id,
            "call_id": self.call_id,
            "kind": self.kind,
            "tool": self.tool,
            "deadline": self.deadline,
        }
        if self.child is not None:
            payload["child"] = self.child
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        get = payload.get
        return cls(
            _str(get("correlation_id")),
            _str(get("call_id")),
            _str(get("kind")),
            _str(get("tool")),
            _opt_str(get("deadline")),
            _opt_int(get("child")),
        )


@quick
@dataclass(frozen=True, slots=True)
class TicketDecided(Event):
    """A ticket's decision: a person's (`by`), an expiry's (EXPIRED: with the `deadline`
    nobody met, HITL-7), a child's end (DELEGATED: with the `child`, DEL-1) or a timer's
    (TIMED, SCHED-3). An allow names who agreed (`approvers` of `required`, HITL-13) and,
    for edited arguments, the edit and the `arguments` that run (HITL-12)."""

    TYPE: ClassVar[str] = TICKET_DECIDED
    correlation_id: str
    call_id: str
    decision: str
    by: str | None = None
    note: str = ""
    approvers: tuple[str, ...] | None = None
    required: int | None = None
    edit: EditRecord | None = None
    arguments: dict[str, Any] | None = None
    deadline: str | None = None
    child: int | None = None

    def to_payload(self) -> Payload:
        payload: Payload = {
            "correlation_id": self.correlation_id,
            "call_id": self.call_id,
            "decision": self.decision,
            "by": self.by,
            "note": self.note,
        }
        if self.approvers is not None:
            payload["approvers"] = list(self.approvers)
        if self.required is not None:
            payload["required"] = self.required
        if self.edit is not None:
            payload.update(self.edit.to_payload())
        if self.arguments is not None:
            payload["arguments"] = self.arguments
        if self.decision == EXPIRED:
            payload["deadline"] = self.deadline
        if self.child is not None:
            payload["child"] = self.child
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        get = payload.get
        return cls(
            _str(get("correlation_id")),
            _str(get("call_id")),
            _str(get("decision")),
            _opt_str(get("by")),
            _str(get("note")),
            _opt_strs(get("approvers")),
            _opt_int(get("required")),
            EditRecord.parse(payload),
            _opt_dict(get("arguments")),
            _opt_str(get("deadline")),
            _opt_int(get("child")),
        )


@quick
@dataclass(frozen=True, slots=True)
class TicketApproved(Event):
    """HITL-13: one allow of several a quorum needs (`approvals` of `required` so far)."""

    TYPE: ClassVar[str] = TICKET_APPROVED
    correlation_id: str
    call_id: str
    by: str | None
    note: str
    approvals: int
    required: int
    approvers: tuple[str, ...] = ()
    edit: EditRecord | None = None

    def to_payload(self) -> Payload:
        payload: Payload = {
            "correlation_id": self.correlation_id,
            "call_id": self.call_id,
            "by": self.by,
            "note": self.note,
            "approvals": self.approvals,
            "required": self.required,
            "approvers": list(self.approvers),
        }
        if self.edit is not None:
            payload.update(self.edit.to_payload())
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        get = payload.get
        return cls(
            _str(get("correlation_id")),
            _str(get("call_id")),
            _opt_str(get("by")),
            _str(get("note")),
            _int(get("approvals")),
            _int(get("required")),
            _strs(get("approvers")),
            EditRecord.parse(payload),
        )


@quick
@dataclass(frozen=True, slots=True)
class TicketNudged(Event):
    """HITL-15: an open ticket's approvers reminded, or it escalated to a `group` (which
    ticket only, never its arguments or recipients)."""

    TYPE: ClassVar[str] = TICKET_REMINDED
    correlation_id: str
    call_id: str
    kind: str  # the ticket's
    tool: str
    deadline: str | None

    def to_payload(self) -> Payload:
        return {
            "correlation_id": self.correlation_id,
            "call_id": self.call_id,
            "kind": self.kind,
            "tool": self.tool,
            "deadline": self.deadline,
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        get = payload.get
        return cls(
            _str(get("correlation_id")),
            _str(get("call_id")),
            _str(get("kind")),
            _str(get("tool")),
            _opt_str(get("deadline")),
        )


@quick
@dataclass(frozen=True, slots=True)
class TicketReminded(TicketNudged):
    TYPE: ClassVar[str] = TICKET_REMINDED


@quick
@dataclass(frozen=True, slots=True)
class TicketEscalated(TicketNudged):
    TYPE: ClassVar[str] = TICKET_ESCALATED
    group: str | None = None

    def to_payload(self) -> Payload:
        return {**TicketNudged.to_payload(self), "group": self.group}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        get = payload.get
        return cls(
            _str(get("correlation_id")),
            _str(get("call_id")),
            _str(get("kind")),
            _str(get("tool")),
            _opt_str(get("deadline")),
            _opt_str(get("group")),
        )
