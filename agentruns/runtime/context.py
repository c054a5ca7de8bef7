"""The log as provider messages (LOOP-7) and the system context a send carries (CG-1).

Results are placed after their turn in model order, wherever the log recorded them, so a
refusal written before an executed call's result still reaches the model in call order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentruns import events as ev
from agentruns.events import LogEntry
from agentruns.frozen import quick
from agentruns.gate.core import DELEGATED, REPLY, SKILL, Source
from agentruns.providers.base import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from agentruns.tools.names import wire_name

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"


def system_texts(sources: Sequence[Source]) -> list[str]:
    """The texts a send carries: a source a fork carried (FORK-1), a reply (CG-12, its
    text is in the messages) and a child's floor (DEL-2) bind by their class only."""
    texts = []
    for source in sources:
        if source.carried_from is not None or source.kind in (REPLY, DELEGATED):
            continue
        if source.kind == SKILL:
            texts.append(f"Skill “{source.title or source.name}”:\n{source.text}")
        else:
            texts.append(source.text)
    return texts


def effective_events(events: Sequence[LogEntry]) -> Sequence[LogEntry]:
    """DEF-6: the newest compaction (standing for everything it replaced) followed by the
    events it kept and every event after it."""
    for index in range(len(events) - 1, -1, -1):
        compaction = events[index]
        if isinstance(data := compaction.data, ev.Compaction):
            kept_from = compaction.sequence if data.kept_from is None else data.kept_from
            return [compaction] + [
                e for e in events if e.sequence >= kept_from and e.type != ev.COMPACTION
            ]
    return events


def _result_message(result: ev.ToolResult) -> ToolResultMessage:
    return ToolResultMessage(
        call_id=result.call_id,
        name=wire_name(result.tool),
        content=result.content,
        # MCP-4: a withheld result reads as a failed call, never as its output.
        is_error=result.status != ev.OK or result.withheld,
    )


def _assistant_message(turn: ev.AssistantMessage) -> AssistantMessage:
    calls = tuple(
        ToolCall(
            id=c.id,
            name=wire_name(c.name),
            arguments=c.arguments,
            raw_arguments=c.raw_arguments,
        )
        for c in turn.tool_calls
    )
    return AssistantMessage(turn.text, calls)


def _summary_message(compaction: ev.Compaction) -> UserMessage:
    return UserMessage(SUMMARY_PREFIX + compaction.summary)


def project(events: Sequence[LogEntry]) -> list[Message]:
    results: dict[str, ToolResultMessage] = {}
    for event in events:
        if isinstance(data := event.data, ev.ToolResult):
            results.setdefault(data.call_id, _result_message(data))
    messages: list[Message] = []
    placed: set[str] = set()
    for event in events:
        data = event.data
        if isinstance(data, ev.Compaction):
            messages.append(_summary_message(data))
        elif isinstance(data, ev.UserMessage):
            messages.append(UserMessage(data.text))
        elif isinstance(data, ev.AssistantMessage):
            message = _assistant_message(data)
            messages.append(message)
            for call in message.tool_calls:
                if call.id in results:
                    messages.append(results[call.id])
                    placed.add(call.id)
    # An orphan result stays visible so the pairing check can refuse the history.
    messages.extend(result for call_id, result in results.items() if call_id not in placed)
    return messages


@quick
@dataclass(frozen=True, slots=True)
class Projection:
    """`project(events)` kept up as the log grows (a run's loop projects its whole log
    before every turn): `messages`, and what appending in order needs to know. Only a log
    that reads in order can be extended: each result answers the next unanswered call of
    the newest turn, a turn or a prompt comes only once every call is answered, and no
    call id comes back. Anything else is projected whole (`project` places it)."""

    messages: tuple[Message, ...]
    waiting: tuple[str, ...] = ()  # the newest turn's unanswered calls, in model order
    ids: frozenset[str] = frozenset()  # every call id so far
    in_order: bool = True


def projection(events: Sequence[LogEntry]) -> Projection:
    """`project(events)`, with what extending it needs."""
    extended = extend_projection(Projection(()), events)
    return extended or Projection(tuple(project(events)), in_order=False)


def extend_projection(known: Projection, added: Sequence[LogEntry]) -> Projection | None:
    """The projection of a log and `added` after it, from the log's (`known`); None when
    `added` does not continue it in order (then project the whole log again)."""
    if not known.in_order:
        return None
    return _in_order(known, added)


def _in_order(known: Projection, added: Sequence[LogEntry]) -> Projection | None:
    messages, waiting, ids = list(known.messages), list(known.waiting), set(known.ids)
    for event in added:
        data = event.data
        if isinstance(data, ev.ToolResult):
            if not waiting or data.call_id != waiting[0]:
                return None
            messages.append(_result_message(data))
            del waiting[0]
        elif isinstance(data, ev.UserMessage | ev.AssistantMessage | ev.Compaction):
            if waiting:
                return None
            if isinstance(data, ev.AssistantMessage):
                turn = _assistant_message(data)
                calls = [call.id for call in turn.tool_calls]
                if ids.intersection(calls) or len(set(calls)) != len(calls):
                    return None
                ids.update(calls)
                waiting = calls
                messages.append(turn)
            elif isinstance(data, ev.UserMessage):
                messages.append(UserMessage(data.text))
            else:
                messages.append(_summary_message(data))
    return Projection(tuple(messages), tuple(waiting), frozenset(ids))


def pairing_problems(messages: Sequence[Message]) -> list[str]:
    """LOOP-7: each call followed by exactly one result for it, in model order; no result
    without its call; no call id used twice."""
    problems: list[str] = []
    seen_calls: set[str] = set()
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        if isinstance(message, ToolResultMessage):
            problems.append(f"result {message.call_id} has no call before it")
        elif isinstance(message, AssistantMessage):
            for call in message.tool_calls:
                if call.id in seen_calls:
                    problems.append(f"call id {call.id} is used twice")
                seen_calls.add(call.id)
                following = messages[index] if index < len(messages) else None
                if isinstance(following, ToolResultMessage) and following.call_id == call.id:
                    index += 1
                else:
                    problems.append(f"call {call.id} has no result in model order")
    return problems
