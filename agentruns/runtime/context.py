"""The log as provider messages (LOOP-7) and the system context a send carries (CG-1).

Results are placed after their turn in model order, wherever the log recorded them, so a
refusal written before an executed call's result still reaches the model in call order.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentruns import events as ev
from agentruns.events import LogEntry
from agentruns.gate.core import SKILL, Source
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
    """The texts a send carries: a source a fork carried (FORK-1) binds by its class only."""
    texts = []
    for source in sources:
        if source.carried_from is not None:
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
        if compaction.type == ev.COMPACTION:
            kept_from = compaction.payload.get("kept_from", compaction.sequence)
            return [compaction] + [
                e for e in events if e.sequence >= kept_from and e.type != ev.COMPACTION
            ]
    return events


def _result_text(payload: dict) -> str:
    return str(payload.get("content", ""))


def project(events: Sequence[LogEntry]) -> list[Message]:
    results: dict[str, ToolResultMessage] = {}
    for event in events:
        if event.type == ev.TOOL_RESULT:
            payload = event.payload
            results.setdefault(
                payload["call_id"],
                ToolResultMessage(
                    call_id=payload["call_id"],
                    name=wire_name(payload.get("tool", "")),
                    content=_result_text(payload),
                    # MCP-4: a withheld result reads as a failed call, never as its output.
                    is_error=payload.get("status") != ev.OK or bool(payload.get("withheld")),
                ),
            )
    messages: list[Message] = []
    placed: set[str] = set()
    for event in events:
        if event.type == ev.COMPACTION:
            messages.append(UserMessage(SUMMARY_PREFIX + event.payload.get("summary", "")))
        elif event.type == ev.USER:
            messages.append(UserMessage(event.payload.get("text", "")))
        elif event.type == ev.ASSISTANT:
            calls = tuple(
                ToolCall(
                    id=c["id"],
                    name=wire_name(c["name"]),
                    arguments=c.get("arguments"),
                    raw_arguments=c.get("raw_arguments"),
                )
                for c in event.payload.get("tool_calls", [])
            )
            messages.append(AssistantMessage(event.payload.get("text", ""), calls))
            for call in calls:
                if call.id in results:
                    messages.append(results[call.id])
                    placed.add(call.id)
    # An orphan result stays visible so the pairing check can refuse the history.
    messages.extend(result for call_id, result in results.items() if call_id not in placed)
    return messages


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
