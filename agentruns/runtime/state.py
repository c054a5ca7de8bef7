"""The run as a fold over its own events, and what to do next (LOOP-4, REC-1..REC-4).

A checkpoint is this state serialised up to a sequence; restoring = checkpoint + folding
every later event, which is why a lost checkpoint costs time, never information. A fresh
run and a resumed one take the same path: fold, then `next_action`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentruns import events as ev
from agentruns.events import LogEntry


@dataclass(frozen=True)
class ProposedCall:
    id: str
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.raw_arguments is not None:
            data["raw_arguments"] = self.raw_arguments
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProposedCall:
        return cls(data["id"], data["name"], data.get("arguments"), data.get("raw_arguments"))


@dataclass
class Turn:
    """The newest model turn of the run and what became of its calls."""

    index: int  # the turn's place in its run (the log's and the tables' `step`)
    text: str
    calls: list[ProposedCall]
    granted: list[str]
    before: int
    results: dict[str, str] = field(default_factory=dict)
    decisions: dict[str, str] = field(default_factory=dict)
    ticket_call: str | None = None
    # HITL-12: calls an approver edited before allowing, and who: the call in `calls`
    # then holds the edited arguments, which are what runs.
    edited: dict[str, str] = field(default_factory=dict)

    def open_calls(self) -> list[ProposedCall]:
        return [call for call in self.calls if call.id not in self.results]

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.index,
            "text": self.text if not self.calls else "",
            "calls": [call.as_dict() for call in self.calls],
            "granted": self.granted,
            "before": self.before,
            "results": self.results,
            "decisions": self.decisions,
            "ticket_call": self.ticket_call,
            "edited": self.edited,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        return cls(
            index=data["step"],
            text=data.get("text", ""),
            calls=[ProposedCall.from_dict(c) for c in data["calls"]],
            granted=list(data["granted"]),
            before=data["before"],
            results=dict(data.get("results", {})),
            decisions=dict(data.get("decisions", {})),
            ticket_call=data.get("ticket_call"),
            edited=dict(data.get("edited", {})),
        )


@dataclass
class RunState:
    last_sequence: int = 0
    turns: int = 0  # model turns taken (the run row's `steps`)
    tool_calls_used: int = 0
    turn: Turn | None = None
    terminal: str | None = None
    # Opaque provider data of `turn` (REC-3: dropped when a newer turn supersedes it).
    continuation: Any = None
    observed: bool = False
    system_redacted: bool = False

    def apply(self, event: LogEntry) -> None:
        handler = _HANDLERS.get(event.type)
        if handler:
            handler(self, event.payload)
        self.last_sequence = max(self.last_sequence, event.sequence)

    def as_dict(self) -> dict[str, Any]:
        return {
            "last_sequence": self.last_sequence,
            "steps": self.turns,
            "tool_calls_used": self.tool_calls_used,
            "turn": self.turn.as_dict() if self.turn else None,
            "terminal": self.terminal,
            "continuation": self.continuation,
            "observed": self.observed,
            "system_redacted": self.system_redacted,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        turn = data.get("turn")
        return cls(
            last_sequence=data["last_sequence"],
            turns=data["steps"],
            tool_calls_used=data["tool_calls_used"],
            turn=Turn.from_dict(turn) if turn else None,
            terminal=data.get("terminal"),
            continuation=data.get("continuation"),
            observed=data.get("observed", False),
            system_redacted=data.get("system_redacted", False),
        )


def _on_assistant(state: RunState, payload: dict[str, Any]) -> None:
    calls = [ProposedCall.from_dict(c) for c in payload.get("tool_calls", [])]
    granted = list(payload.get("granted", [c.id for c in calls]))
    before = payload.get("tool_calls_before", state.tool_calls_used)
    state.turn = Turn(payload["step"], payload.get("text", ""), calls, granted, before)
    state.turns = max(state.turns, payload["step"] + 1)
    state.tool_calls_used = before + len(granted)
    state.continuation = None


def _on_result(state: RunState, payload: dict[str, Any]) -> None:
    if state.turn and any(c.id == payload["call_id"] for c in state.turn.calls):
        state.turn.results.setdefault(payload["call_id"], payload["status"])
    # DEL-3: a delegation's result brings the tool calls its child's tree made.
    state.tool_calls_used += int(payload.get("tool_calls", 0))


def _on_ticket_opened(state: RunState, payload: dict[str, Any]) -> None:
    if state.turn:
        state.turn.ticket_call = payload.get("call_id") or None


def _on_ticket_decided(state: RunState, payload: dict[str, Any]) -> None:
    if state.turn:
        call_id = payload.get("call_id")
        if call_id:
            state.turn.decisions[call_id] = payload["decision"]
            if payload["decision"] == ev.ALLOW and "arguments" in payload:
                _edited(state.turn, call_id, payload)
        state.turn.ticket_call = None


def _edited(turn: Turn, call_id: str, payload: dict[str, Any]) -> None:
    """HITL-12: the approved call is the edited one, under the same id and tool."""
    turn.calls = [
        ProposedCall(call.id, call.name, dict(payload["arguments"])) if call.id == call_id else call
        for call in turn.calls
    ]
    turn.edited[call_id] = str(payload.get("edited_by") or "")


def _on_observed(state: RunState, payload: dict[str, Any]) -> None:
    state.observed = True


def _on_redacted(state: RunState, payload: dict[str, Any]) -> None:
    if payload.get("where") == "system":
        state.system_redacted = True


def _terminal(status: str) -> Any:
    def handler(state: RunState, payload: dict[str, Any]) -> None:
        state.terminal = status

    return handler


_HANDLERS = {
    ev.ASSISTANT: _on_assistant,
    ev.TOOL_RESULT: _on_result,
    ev.TICKET_OPENED: _on_ticket_opened,
    ev.TICKET_DECIDED: _on_ticket_decided,
    ev.CONTEXT_OBSERVED: _on_observed,
    ev.SECRET_REDACTED: _on_redacted,
    **{kind: _terminal(status) for kind, status in ev.TERMINAL_EVENTS.items()},
}


def restore(checkpoint: dict[str, Any] | None, events: list[LogEntry]) -> RunState:
    """REC-1: the newest surviving checkpoint, then every event committed after it."""
    state = RunState.from_dict(checkpoint) if checkpoint else RunState()
    for event in events:
        if event.sequence > state.last_sequence:
            state.apply(event)
    return state


@dataclass(frozen=True)
class Finished:
    status: str


@dataclass(frozen=True)
class Complete:
    """REC-4: the final reply is committed; only finalisation is left."""

    text: str


@dataclass(frozen=True)
class AskModel:
    turn_index: int


@dataclass(frozen=True)
class CallTools:
    """REC-2/REC-3: the newest turn's unanswered calls, at the turn they were proposed in."""

    turn: Turn
    calls: list[ProposedCall]


Action = Finished | Complete | AskModel | CallTools


def next_action(state: RunState) -> Action:
    if state.terminal:
        return Finished(state.terminal)
    turn = state.turn
    if turn is None:
        return AskModel(state.turns)
    if not turn.calls:
        return Complete(turn.text)
    open_calls = turn.open_calls()
    if not open_calls:
        return AskModel(state.turns)
    return CallTools(turn, open_calls)
