"""FS-3: what a model turn sends, composed by ONE pure function, so the dry run and the
loop agree by construction: the redacted system context (CG-1, CG-11), the mode's offered
tools and deferred catalog (DEF-1..DEF-4), and the log as provider messages (LOOP-7)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agentruns import events as ev
from agentruns.gate.core import Source
from agentruns.providers.base import Message, ToolSpec
from agentruns.runtime.context import project, system_texts
from agentruns.runtime.redaction import redact
from agentruns.runtime.state import Ev
from agentruns.tools.policy import Mode, deferred_catalog, offered_tools
from agentruns.tools.registry import Tool


@dataclass(frozen=True)
class Composed:
    system: tuple[str, ...]
    # CG-11: what redaction found in the system texts, by kind (recorded once per run).
    system_redacted: dict[str, int]
    tools: tuple[Tool, ...]
    specs: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]


def compose_request(
    *, sources: Sequence[Source], mode: Mode, active: Iterable[str], events: Sequence[Ev]
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


def thread_mode(events: Iterable[Ev]) -> str | None:
    """DEF-1: the mode the thread's log last switched to; None is the default mode."""
    named = None
    for event in events:
        if event.type == ev.MODE_SWITCHED:
            named = event.payload.get("mode")
    return named
