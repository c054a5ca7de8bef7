"""Reading stored values as hostile input, the base of every event record, and the
values records share (a proposed call, where a send went, an approver's edit)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from agentruns.events.vocabulary import Item, Payload
from agentruns.frozen import quick

# A stored payload is JSON: its objects are dicts and its arrays lists (a record built in
# memory may hold tuples), so these checks are exact and cheap.
_SEQUENCES = (list, tuple)


def _str(value: object, default: str = "") -> str:
    return value if isinstance(value, str) else default if value is None else str(value)


def _opt_str(value: object) -> str | None:
    return None if value is None else _str(value)


def _int(value: object, default: int = 0) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return int(str(value))
    except ValueError:
        return default


def _opt_int(value: object) -> int | None:
    return None if value is None else _int(value)


def _dict(value: object) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def _opt_dict(value: object) -> dict[str, Any] | None:
    return dict(value) if isinstance(value, dict) else None


def _strs(value: object) -> tuple[str, ...]:
    return tuple(_str(v) for v in value) if isinstance(value, _SEQUENCES) else ()


def _opt_strs(value: object) -> tuple[str, ...] | None:
    return _strs(value) if isinstance(value, _SEQUENCES) else None


def _dicts(value: object) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, _SEQUENCES):
        return ()
    return tuple(dict(v) for v in value if isinstance(v, dict))


def _counts(value: object) -> dict[str, int]:
    return {_str(k): _int(v) for k, v in value.items()} if isinstance(value, dict) else {}


class Event:
    """One event's payload as a typed value. `TYPE` is the stored type."""

    __slots__ = ()
    TYPE: ClassVar[str] = ""

    def to_payload(self) -> Payload:
        raise NotImplementedError

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        raise NotImplementedError

    def item(self) -> Item:
        """(type, payload), as an append or a step writes it, carrying this record so the
        loop's own log entry of it needs no parsing back (`LogEntry.at`)."""
        return RecordItem(self.TYPE, self.to_payload(), self)


class RecordItem(tuple[str, Payload]):
    """An `Item` that knows the record it was written from."""

    record: Event

    def __new__(cls, kind: str, payload: Payload, record: Event) -> RecordItem:
        item = super().__new__(cls, (kind, payload))
        item.record = record
        return item


@quick
@dataclass(frozen=True, slots=True)
class CopiedFrom:
    """FORK-1: the original event a fork's copy came from."""

    run: int | None
    sequence: int

    def to_payload(self) -> Payload:
        return {"run": self.run, "sequence": self.sequence}

    @classmethod
    def parse(cls, raw: object) -> CopiedFrom | None:
        if not isinstance(raw, dict):
            return None
        return cls(_opt_int(raw.get("run")), _int(raw.get("sequence")))


def _copied(payload: Payload, copied_from: CopiedFrom | None) -> Payload:
    if copied_from is not None:
        payload["copied_from"] = copied_from.to_payload()
    return payload


@quick
@dataclass(frozen=True, slots=True)
class ProposedCall:
    """One tool call a model turn proposed (`arguments` None: they were no JSON object)."""

    id: str
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str | None = None

    def as_dict(self) -> Payload:
        data: Payload = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.raw_arguments is not None:
            data["raw_arguments"] = self.raw_arguments
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProposedCall:
        return cls(
            _str(data.get("id")),
            _str(data.get("name")),
            _opt_dict(data.get("arguments")),
            _opt_str(data.get("raw_arguments")),
        )


@quick
@dataclass(frozen=True, slots=True)
class ServedBy:
    """LOOP-3: which link of the chain answered a turn (TZ-5)."""

    configuration: str | None
    provider: str | None
    model: str | None

    def to_payload(self) -> Payload:
        return {"configuration": self.configuration, "provider": self.provider, "model": self.model}

    @classmethod
    def parse(cls, raw: object) -> ServedBy | None:
        if not isinstance(raw, dict) or not raw:
            return None
        get = raw.get
        return cls(
            _opt_str(get("configuration")), _opt_str(get("provider")), _opt_str(get("model"))
        )


@quick
@dataclass(frozen=True, slots=True)
class SentRecord:
    """GOV-2: what a turn was sent under, as it was: the versions of the configuration, the
    link and the provider that answered and of each source carried, the zone and ceiling
    the gate judged, and the results it withheld (MCP-4), by sequence."""

    configuration_version: int | None
    link_version: int | None
    provider_version: int | None
    zone: str
    ceiling: str
    sources: dict[str, int]
    withheld: tuple[int, ...] = ()

    def to_payload(self) -> Payload:
        return {
            "configuration_version": self.configuration_version,
            "link_version": self.link_version,
            "provider_version": self.provider_version,
            "zone": self.zone,
            "ceiling": self.ceiling,
            "sources": dict(self.sources),
            "withheld": list(self.withheld),
        }

    @classmethod
    def parse(cls, raw: object) -> SentRecord | None:
        if not isinstance(raw, dict) or not raw:
            return None
        withheld = raw.get("withheld")
        return cls(
            _opt_int(raw.get("configuration_version")),
            _opt_int(raw.get("link_version")),
            _opt_int(raw.get("provider_version")),
            _str(raw.get("zone")),
            _str(raw.get("ceiling")),
            _counts(raw.get("sources")),
            tuple(_int(s) for s in withheld) if isinstance(withheld, _SEQUENCES) else (),
        )


@quick
@dataclass(frozen=True, slots=True)
class EditRecord:
    """HITL-12: an approver's edit of a call's arguments: both digests, and who."""

    original_digest: str
    arguments_digest: str
    edited_by: str | None

    def to_payload(self) -> Payload:
        return {
            "original_digest": self.original_digest,
            "arguments_digest": self.arguments_digest,
            "edited_by": self.edited_by,
        }

    @classmethod
    def parse(cls, payload: Mapping[str, Any]) -> EditRecord | None:
        if "arguments_digest" not in payload:
            return None
        get = payload.get
        return cls(
            _str(get("original_digest")), _str(get("arguments_digest")), _opt_str(get("edited_by"))
        )
