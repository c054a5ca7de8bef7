"""The run as a fold over its own events, and what to do next (LOOP-4, REC-1..REC-4).

A checkpoint is this state serialised up to a sequence; restoring = checkpoint + folding
every later event, which is why a lost checkpoint costs time, never information. A fresh
run and a resumed one take the same path: fold, then `next_action`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentruns import events as ev
from agentruns.events import LogEntry, ProposedCall
from agentruns.frozen import quick

__all__ = ["ProposedCall"]  # a call as the fold holds it is the one the log records


@dataclass
class Turn:
    """The newest model turn of the run and what became of its calls."""

    # Its place in its run (`ToolInvocation.turn_index`); the log's payloads and the
    # checkpoint states store it as "step", a name kept so stored JSON needs no migration.
    turn_index: int
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
            "step": self.turn_index,
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
            turn_index=data["step"],
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
    # Model turns taken (the run row's `turns`); a checkpoint state stores it as "steps".
    turns: int = 0
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
            handler(self, event.data)
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


# Each takes the record of its event type (`LogEntry.data`), read once per entry.
Handler = Callable[[RunState, Any], None]


def _on_assistant(state: RunState, turn: ev.AssistantMessage) -> None:
    calls = list(turn.tool_calls)
    granted = list(turn.granted) if turn.granted is not None else [c.id for c in calls]
    before = state.tool_calls_used if turn.tool_calls_before is None else turn.tool_calls_before
    index = state.turns if turn.turn_index is None else turn.turn_index
    state.turn = Turn(index, turn.text, calls, granted, before)
    state.turns = max(state.turns, index + 1)
    state.tool_calls_used = before + len(granted)
    state.continuation = None


def _on_result(state: RunState, result: ev.ToolResult) -> None:
    if state.turn and any(c.id == result.call_id for c in state.turn.calls):
        state.turn.results.setdefault(result.call_id, result.status)
    # DEL-3: a delegation's result brings the tool calls its child's tree made.
    state.tool_calls_used += result.tool_calls or 0


def _on_ticket_opened(state: RunState, opened: ev.TicketOpened) -> None:
    if state.turn:
        state.turn.ticket_call = opened.call_id or None


def _on_ticket_decided(state: RunState, decided: ev.TicketDecided) -> None:
    if state.turn:
        call_id = decided.call_id
        if call_id:
            state.turn.decisions[call_id] = decided.decision
            if decided.decision == ev.ALLOW and decided.arguments is not None:
                _edited(state.turn, call_id, decided)
        state.turn.ticket_call = None


def _edited(turn: Turn, call_id: str, decided: ev.TicketDecided) -> None:
    """HITL-12: the approved call is the edited one, under the same id and tool."""
    turn.calls = [
        ProposedCall(call.id, call.name, decided.arguments) if call.id == call_id else call
        for call in turn.calls
    ]
    edited_by = decided.edit.edited_by if decided.edit else None
    turn.edited[call_id] = edited_by or ""


def _on_observed(state: RunState, observed: ev.ContextObserved) -> None:
    state.observed = True


def _on_redacted(state: RunState, redacted: ev.SecretRedacted) -> None:
    if redacted.where == "system":
        state.system_redacted = True


def _terminal(status: str) -> Handler:
    def handler(state: RunState, event: ev.Event) -> None:
        state.terminal = status

    return handler


_HANDLERS: dict[str, Handler] = {
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


@quick
@dataclass(frozen=True, slots=True)
class AskModel:
    turn_index: int


@quick
@dataclass(frozen=True, slots=True)
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
