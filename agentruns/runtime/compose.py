"""FS-3: the request a thread's log would send next, by ONE recipe that the loop, the dry
run and the inspector all follow, so they agree by construction: `log_view` reads from the
log what the send carries besides the sources (the effective events after compaction,
DEF-6; the mode the thread last switched to, DEF-1; the deferred tools the log activated,
DEF-4), and `next_request` composes it with the sources: the redacted system context
(CG-1, CG-11), the mode's offered tools and deferred catalog, and the log as provider
messages (LOOP-7). Pure functions over plain values."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentruns import events as ev
from agentruns.events import LogEntry
from agentruns.gate.core import Source
from agentruns.providers.base import Message, ToolSpec
from agentruns.runtime.context import effective_events, project, system_texts
from agentruns.runtime.deferred import active_deferred
from agentruns.runtime.redaction import redact
from agentruns.tools.policy import Mode, deferred_catalog, offered_tools
from agentruns.tools.registry import Tool

if TYPE_CHECKING:
    from agentruns.runtime.config import RuntimeConfig


@dataclass(frozen=True)
class Composed:
    system: tuple[str, ...]
    # CG-11: what redaction found in the system texts, by kind (recorded once per run).
    system_redacted: dict[str, int]
    tools: tuple[Tool, ...]
    specs: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]


def compose_request(
    *, sources: Sequence[Source], mode: Mode, active: Iterable[str], events: Sequence[LogEntry]
) -> Composed:
    """`events` are the effective events (after compaction); `active` the deferred tools
    the log activated."""
    cleaned, found = [], Counter[str]()
    for text in system_texts(sources):
        clean, kinds = redact(text)
        cleaned.append(clean)
        found.update(kinds)
    tools = tuple(offered_tools(mode, active))
    return Composed(
        system=(*cleaned, *deferred_catalog(mode)),
        system_redacted=dict(found),
        tools=tools,
        specs=tuple(ToolSpec(t.wire_name, t.description, t.parameters) for t in tools),
        messages=tuple(project(events)),
    )


def thread_mode(events: Iterable[LogEntry]) -> str | None:
    """DEF-1: the mode the thread's log last switched to; None is the default mode."""
    named = None
    for event in events:
        if event.type == ev.MODE_SWITCHED:
            named = event.payload.get("mode")
    return named


@dataclass(frozen=True)
class LogView:
    """What a thread's log says its next send carries, besides the sources."""

    effective: tuple[LogEntry, ...]
    mode: Mode
    active: frozenset[str]


def log_view(log: Sequence[LogEntry], config: RuntimeConfig) -> LogView:
    effective = tuple(effective_events(log))
    mode = config.mode(thread_mode(log))
    active = active_deferred(effective, mode.deferred) if mode.deferred else set()
    return LogView(effective, mode, frozenset(active))


def next_request(view: LogView, *, sources: Sequence[Source]) -> Composed:
    return compose_request(
        sources=sources, mode=view.mode, active=view.active, events=view.effective
    )
