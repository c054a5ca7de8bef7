"""DEF-6: replacing the oldest whole turns of an over-budget context by a summary.

Pure planning over plain values: the effective events are cut into units that start at a
user message, an assistant turn (with its results) or a compaction, so a cut never
separates a tool call from its result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentruns import events as ev
from agentruns.events import LogEntry

STARTS_UNIT = {ev.USER, ev.ASSISTANT, ev.COMPACTION}
SUMMARY_OVERHEAD = 16
# Compact down to this share of the budget, so the next turns do not compact again at once.
TARGET_SHARE = 0.6


@dataclass(frozen=True)
class Unit:
    events: tuple[LogEntry, ...]
    tokens: int

    @property
    def first_sequence(self) -> int:
        return self.events[0].sequence


def units_of(
    effective: Sequence[LogEntry], tokens_of: Callable[[Sequence[LogEntry]], int]
) -> list[Unit]:
    groups: list[list[LogEntry]] = []
    for event in effective:
        # An event that is no message (a mode switch, a redaction note) joins a unit rather
        # than forming an empty one of its own.
        opened = bool(groups) and any(e.type in STARTS_UNIT for e in groups[-1])
        if event.type in STARTS_UNIT and opened:
            groups.append([event])
        elif groups:
            groups[-1].append(event)
        else:
            groups.append([event])
    return [Unit(tuple(group), tokens_of(group)) for group in groups]


@dataclass(frozen=True)
class Plan:
    summarised: tuple[Unit, ...]
    kept: tuple[Unit, ...]
    summary_allowance: int

    @property
    def kept_from(self) -> int:
        return self.kept[0].first_sequence


def plan(units: Sequence[Unit], *, fixed: int, budget: int) -> Plan | None:
    """None when the context fits. Otherwise the fewest oldest units whose replacement by
    a bounded summary brings it under the target; at least the newest unit is kept."""
    total = fixed + sum(unit.tokens for unit in units)
    if total <= budget or len(units) < 2:
        return None
    # The summary arrives as a user message with a short prefix: reserve that too.
    allowance = max(64, min(1024, budget // 8))
    reserve = allowance + SUMMARY_OVERHEAD
    target = budget * TARGET_SHARE
    for cut in range(1, len(units)):
        if fixed + reserve + sum(unit.tokens for unit in units[cut:]) <= target:
            break
    return Plan(tuple(units[:cut]), tuple(units[cut:]), allowance)


def transcript(events: Sequence[LogEntry]) -> str:
    """What the summariser reads: plain text, so the request carries no tool blocks."""
    lines = []
    for event in events:
        data = event.data
        if isinstance(data, ev.Compaction):
            lines.append(f"Earlier summary: {data.summary}")
        elif isinstance(data, ev.UserMessage):
            lines.append(f"User: {data.text}")
        elif isinstance(data, ev.AssistantMessage):
            calls = "; ".join(
                f"{c.name}({c.raw_arguments or c.arguments})" for c in data.tool_calls
            )
            lines.append(f"Assistant: {data.text}" + (f" [called {calls}]" if calls else ""))
        elif isinstance(data, ev.ToolResult):
            lines.append(f"Result of {data.tool} ({data.status}): {data.content}")
    return "\n".join(lines)
