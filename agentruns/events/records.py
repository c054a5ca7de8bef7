"""The records of a run's conversation and its life: messages, results, compaction,
redaction, modes, the gate's verdicts, a run's end, fork and delegation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from agentruns.events.values import (
    CopiedFrom,
    Event,
    ProposedCall,
    RecordItem,
    SentRecord,
    ServedBy,
    _copied,
    _counts,
    _dict,
    _dicts,
    _int,
    _opt_dict,
    _opt_int,
    _opt_str,
    _opt_strs,
    _str,
    _strs,
)
from agentruns.events.vocabulary import (
    ASSISTANT,
    COMPACTION,
    CONTEXT_OBSERVED,
    CONTEXT_REFUSED,
    MODE_SWITCHED,
    RUN_CANCELLED,
    RUN_COMPLETED,
    RUN_DELEGATED,
    RUN_FAILED,
    RUN_FORKED,
    RUN_REPLAYED,
    SECRET_REDACTED,
    SOURCES_DROPPED,
    TOOL_RESULT,
    USER,
    Item,
    Payload,
)
from agentruns.frozen import quick


@quick
@dataclass(frozen=True, slots=True)
class UserMessage(Event):
    """A task or follow-up. A person's is never classified (CG-2); a delegated child's task
    was written by its parent's model, so it carries that reply's `label` (CG-12, DEL-2)."""

    TYPE: ClassVar[str] = USER
    text: str
    copied_from: CopiedFrom | None = None
    label: dict[str, Any] | None = None

    def to_payload(self) -> Payload:
        payload: Payload = {"text": self.text}
        if self.label:
            payload["label"] = self.label
        return _copied(payload, self.copied_from)

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        get = payload.get
        return cls(_str(get("text")), CopiedFrom.parse(get("copied_from")), _opt_dict(get("label")))


@quick
@dataclass(frozen=True, slots=True)
class AssistantMessage(Event):
    """A model turn. `turn_index` (stored as `"step"`) is its place in its run; `granted`
    the calls the tool budget let run (absent in old rows: all of them);
    `tool_calls_before` the run's calls before it (absent: as folded so far); `usage` the
    provider's token counts (OPS-1; a fork's copy has none: the original paid); `label`
    the class its text carries (CG-12, `gate.core.Label.as_dict`, read by `parse_label`)."""

    TYPE: ClassVar[str] = ASSISTANT
    text: str = ""
    tool_calls: tuple[ProposedCall, ...] = ()
    turn_index: int | None = None
    tool_calls_before: int | None = None
    served_by: ServedBy | None = None
    usage: dict[str, int] | None = None
    sent: SentRecord | None = None
    label: dict[str, Any] | None = None
    granted: tuple[str, ...] | None = None
    copied_from: CopiedFrom | None = None

    def to_payload(self) -> Payload:
        payload: Payload = {"text": self.text, "tool_calls": [c.as_dict() for c in self.tool_calls]}
        if self.turn_index is not None:
            payload["step"] = self.turn_index
        if self.tool_calls_before is not None:
            payload["tool_calls_before"] = self.tool_calls_before
        payload["served_by"] = self.served_by.to_payload() if self.served_by else {}
        if self.usage is not None:
            payload["usage"] = dict(self.usage)
        payload["sent"] = self.sent.to_payload() if self.sent else {}
        if self.label:
            payload["label"] = self.label
        if self.granted is not None:
            payload["granted"] = list(self.granted)
        return _copied(payload, self.copied_from)

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        get = payload.get
        calls = get("tool_calls")
        return cls(
            text=_str(get("text")),
            tool_calls=tuple(
                ProposedCall.from_dict(c)
                for c in (calls if isinstance(calls, list) else ())
                if isinstance(c, dict)
            ),
            turn_index=_opt_int(get("step")),
            tool_calls_before=_opt_int(get("tool_calls_before")),
            served_by=ServedBy.parse(get("served_by")),
            usage=_counts(usage) if isinstance(usage := get("usage"), dict) else None,
            sent=SentRecord.parse(get("sent")),
            label=_opt_dict(get("label")),
            granted=_opt_strs(get("granted")),
            copied_from=CopiedFrom.parse(get("copied_from")),
        )


@quick
@dataclass(frozen=True, slots=True)
class ToolResult(Event):
    """A call's result, whoever wrote it (loop, resume, cancel, a child's end).
    `data_class` (stored as `"class"`) is its tool's output class then (MCP-4); a
    delegation's result brings its child tree's `tool_calls` (DEL-3); a `tool_search` its
    `added_tool_names` (DEF-4). `withheld` is never stored: the next send replaced the
    content by a note (MCP-4)."""

    TYPE: ClassVar[str] = TOOL_RESULT
    call_id: str
    tool: str
    status: str
    content: str
    data_class: str | None = None
    added_tool_names: tuple[str, ...] | None = None
    tool_calls: int | None = None
    withheld: bool = False
    copied_from: CopiedFrom | None = None

    def to_payload(self) -> Payload:
        payload: Payload = {
            "call_id": self.call_id,
            "tool": self.tool,
            "status": self.status,
            "content": self.content,
        }
        if self.tool_calls is not None:
            payload["tool_calls"] = self.tool_calls
        if self.data_class is not None:
            payload["class"] = self.data_class
        if self.added_tool_names is not None:
            payload["added_tool_names"] = list(self.added_tool_names)
        if self.withheld:
            payload["withheld"] = True
        return _copied(payload, self.copied_from)

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        get = payload.get
        return cls(
            _str(get("call_id")),
            _str(get("tool")),
            _str(get("status")),
            _str(get("content")),
            _opt_str(get("class")),
            _opt_strs(get("added_tool_names")),
            _opt_int(get("tool_calls")),
            bool(get("withheld")),
            CopiedFrom.parse(get("copied_from")),
        )


def result_item(
    call_id: str,
    tool: str,
    status: str,
    content: str,
    *,
    data_class: str | None = None,
    added_tool_names: list[str] | None = None,
    tool_calls: int | None = None,
) -> Item:
    """The one shape of a `tool.result` event, whoever writes it (loop, resume, cancel)."""
    names = None if added_tool_names is None else tuple(added_tool_names)
    return ToolResult(call_id, tool, status, content, data_class, names, tool_calls).item()


@quick
@dataclass(frozen=True, slots=True)
class Failure(Event):
    """A run's failure (`run.failed`) or the gate's refusal (`context.refused`, CG-7/CG-8):
    a stable `code`, words, and the structured `fields` beside them."""

    TYPE: ClassVar[str] = RUN_FAILED
    code: str | None
    detail: str
    fields: dict[str, Any]

    def to_payload(self) -> Payload:
        head: Payload = {} if self.code is None else {"code": self.code}
        return {**head, "detail": self.detail, **self.fields}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        rest = {k: v for k, v in payload.items() if k not in ("code", "detail")}
        return cls(_opt_str(payload.get("code")), _str(payload.get("detail")), rest)


@quick
@dataclass(frozen=True, slots=True)
class RunFailed(Failure):
    TYPE: ClassVar[str] = RUN_FAILED


@quick
@dataclass(frozen=True, slots=True)
class ContextRefused(Failure):
    TYPE: ClassVar[str] = CONTEXT_REFUSED


@quick
@dataclass(frozen=True, slots=True)
class ContextObserved(Event):
    """CG-6: a refusal the observing gate let through."""

    TYPE: ClassVar[str] = CONTEXT_OBSERVED
    verdict: str

    def to_payload(self) -> Payload:
        return {"verdict": self.verdict}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        return cls(_str(payload.get("verdict")))


@quick
@dataclass(frozen=True, slots=True)
class SourcesDropped(Event):
    """FS-4: forced sources left out ({kind, id, name, reason} each)."""

    TYPE: ClassVar[str] = SOURCES_DROPPED
    sources: tuple[dict[str, Any], ...]

    def to_payload(self) -> Payload:
        return {"sources": [dict(s) for s in self.sources]}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        return cls(_dicts(payload.get("sources")))


@quick
@dataclass(frozen=True, slots=True)
class SecretRedacted(Event):
    """CG-11: what redaction found in a text (`where`), by kind, never the values."""

    TYPE: ClassVar[str] = SECRET_REDACTED
    where: str
    kinds: dict[str, int]

    def to_payload(self) -> Payload:
        return {"where": self.where, "kinds": dict(self.kinds)}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        return cls(_str(payload.get("where")), _counts(payload.get("kinds")))


def redacted(where: str, kinds: Mapping[str, int]) -> list[Item]:
    """CG-11: the one way a redaction is recorded, before the text it was found in; no
    event when nothing was found."""
    return [SecretRedacted(where, dict(kinds)).item()] if kinds else []


@quick
@dataclass(frozen=True, slots=True)
class ModeSwitched(Event):
    """DEF-1: the thread's mode from here on (None: the default)."""

    TYPE: ClassVar[str] = MODE_SWITCHED
    mode: str | None

    def to_payload(self) -> Payload:
        return {"mode": self.mode}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        return cls(_opt_str(payload.get("mode")))


@quick
@dataclass(frozen=True, slots=True)
class Compaction(Event):
    """DEF-6: a summary standing for every event before `kept_from`, with the deferred
    tools active then (DEF-4), the classes of the results it summarises (MCP-4, tool ->
    class) and the class its text carries (CG-12). `withheld` is never stored (MCP-4)."""

    TYPE: ClassVar[str] = COMPACTION
    summary: str
    kept_from: int | None = None
    active_deferred: tuple[str, ...] = ()
    summarised_events: int = 0
    results: dict[str, str] | None = None
    usage: dict[str, int] | None = None
    label: dict[str, Any] | None = None
    withheld: bool = False
    copied_from: CopiedFrom | None = None

    def to_payload(self) -> Payload:
        payload: Payload = {
            "summary": self.summary,
            "kept_from": self.kept_from,
            "active_deferred": list(self.active_deferred),
            "summarised_events": self.summarised_events,
        }
        if self.results:
            payload["results"] = dict(self.results)
        if self.usage is not None:
            payload["usage"] = dict(self.usage)
        if self.label:
            payload["label"] = self.label
        if self.withheld:
            payload["withheld"] = True
        return _copied(payload, self.copied_from)

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        get = payload.get
        results = get("results")
        return cls(
            _str(get("summary")),
            _opt_int(get("kept_from")),
            _strs(get("active_deferred")),
            _int(get("summarised_events")),
            {_str(k): _str(v) for k, v in results.items()} if isinstance(results, dict) else None,
            _counts(usage) if isinstance(usage := get("usage"), dict) else None,
            _opt_dict(get("label")),
            bool(get("withheld")),
            CopiedFrom.parse(get("copied_from")),
        )


@quick
@dataclass(frozen=True, slots=True)
class RunCompleted(Event):
    """The run's final reply, with the class it carries (CG-12)."""

    TYPE: ClassVar[str] = RUN_COMPLETED
    final_reply: str
    label: dict[str, Any] | None = None

    def to_payload(self) -> Payload:
        payload: Payload = {"final_reply": self.final_reply}
        if self.label:
            payload["label"] = self.label
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        return cls(_str(payload.get("final_reply")), _opt_dict(payload.get("label")))


@quick
@dataclass(frozen=True, slots=True)
class RunCancelled(Event):
    """HITL-11: who asked (OPS-5)."""

    TYPE: ClassVar[str] = RUN_CANCELLED
    by: str | None

    def to_payload(self) -> Payload:
        return {"by": self.by}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        return cls(_opt_str(payload.get("by")))


@quick
@dataclass(frozen=True, slots=True)
class RunForked(Event):
    """FORK-1: a fork's log opens with its configuration, the sources it carries from its
    original ({kind, id, from} each), where it was forked (`forked_from` {run, at}) and,
    for a fork of a child's thread, that child's floor (DEL-2: `floor` {run, class,
    origin}, the parent run and its label)."""

    TYPE: ClassVar[str] = RUN_FORKED
    configuration: str
    carried: tuple[dict[str, Any], ...]
    forked_from: dict[str, Any]
    floor: dict[str, Any] | None = None

    def to_payload(self) -> Payload:
        payload: Payload = {
            "configuration": self.configuration,
            "carried": [dict(c) for c in self.carried],
            "forked_from": dict(self.forked_from),
        }
        if self.floor is not None:
            payload["floor"] = dict(self.floor)
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        get = payload.get
        return cls(
            _str(get("configuration")),
            _dicts(get("carried")),
            _dict(get("forked_from")),
            _opt_dict(get("floor")),
        )


@quick
@dataclass(frozen=True, slots=True)
class RunDelegated(Event):
    """DEL-1..DEL-5: a child's log opens with its parent run and call, its configuration,
    the sources it carries and its floor, the parent's effective class at the call as a
    CG-12 label (DEL-2), its depth, its share of its tree's tool calls (DEL-3) and the
    parent's tool span it is traced under (DEL-5)."""

    TYPE: ClassVar[str] = RUN_DELEGATED
    parent_run: int
    parent_call_id: str
    configuration: str = ""
    carried: tuple[dict[str, Any], ...] = ()
    depth: int = 1
    tool_call_budget: int | None = None
    trace_parent: Any = None
    floor: dict[str, Any] | None = None

    def to_payload(self) -> Payload:
        payload: Payload = {
            "delegated_by": {"run": self.parent_run, "call_id": self.parent_call_id},
            "configuration": self.configuration,
            "carried": [dict(c) for c in self.carried],
            "depth": self.depth,
            "tool_call_budget": self.tool_call_budget,
            "trace_parent": self.trace_parent,
        }
        if self.floor is not None:
            payload["floor"] = dict(self.floor)
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        get = payload.get
        parent = _dict(get("delegated_by"))
        return cls(
            _int(parent.get("run")),
            _str(parent.get("call_id")),
            _str(get("configuration")),
            _dicts(get("carried")),
            _int(get("depth"), 1),
            _opt_int(get("tool_call_budget")),
            get("trace_parent"),
            _opt_dict(get("floor")),
        )


@quick
@dataclass(frozen=True, slots=True)
class Recorded:
    """GOV-4: one result of a replay's original, by its call's tool name and the digest
    of its arguments (`tools.registry.digest`), with the class it was produced under and
    the deferred tools it activated."""

    tool: str
    arguments: str
    status: str
    content: str
    data_class: str | None = None
    added_tool_names: tuple[str, ...] | None = None

    def as_dict(self) -> Payload:
        payload: Payload = {
            "tool": self.tool,
            "arguments": self.arguments,
            "status": self.status,
            "content": self.content,
        }
        if self.data_class is not None:
            payload["class"] = self.data_class
        if self.added_tool_names is not None:
            payload["added_tool_names"] = list(self.added_tool_names)
        return payload

    @classmethod
    def parse(cls, value: Mapping[str, Any]) -> Recorded:
        get = value.get
        return cls(
            _str(get("tool")),
            _str(get("arguments")),
            _str(get("status")),
            _str(get("content")),
            _opt_str(get("class")),
            _opt_strs(get("added_tool_names")),
        )


@quick
@dataclass(frozen=True, slots=True)
class RunReplayed(Event):
    """GOV-4: a replay's log opens with its configuration, the sources it carries from its
    original ({kind, id, from} each), its replay, the run it re-runs (`replay_of` {run,
    at}: the original's thread sequence the copy ends at), that run's recording and, for
    a child's thread, the child's floor (DEL-2, as `RunForked.floor`)."""

    TYPE: ClassVar[str] = RUN_REPLAYED
    configuration: str
    carried: tuple[dict[str, Any], ...]
    replay: int
    replay_of: dict[str, Any]
    recording: tuple[Recorded, ...] = ()
    floor: dict[str, Any] | None = None

    @property
    def original(self) -> int:
        return _int(self.replay_of.get("run"))

    def to_payload(self) -> Payload:
        payload: Payload = {
            "configuration": self.configuration,
            "carried": [dict(c) for c in self.carried],
            "replay": self.replay,
            "replay_of": dict(self.replay_of),
            "recording": [entry.as_dict() for entry in self.recording],
        }
        if self.floor is not None:
            payload["floor"] = dict(self.floor)
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        get = payload.get
        return cls(
            _str(get("configuration")),
            _dicts(get("carried")),
            _int(get("replay")),
            _dict(get("replay_of")),
            tuple(Recorded.parse(entry) for entry in _dicts(get("recording"))),
            _opt_dict(get("floor")),
        )


@quick
@dataclass(frozen=True, slots=True)
class Other(Event):
    """An event of a type this code does not know (a newer writer's): its payload as is."""

    type: str
    payload: dict[str, Any]

    def to_payload(self) -> Payload:
        return dict(self.payload)

    def item(self) -> Item:
        return RecordItem(self.type, self.to_payload(), self)
