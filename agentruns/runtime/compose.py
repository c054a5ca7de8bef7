"""FS-3: the request a thread's log would send next, by ONE recipe that the loop, the dry
run and the inspector all follow, so they agree by construction: `log_view` reads from the
log what the send carries besides the sources (the effective events after compaction,
DEF-6; the mode the thread last switched to, DEF-1; the deferred tools the log activated,
DEF-4; the tool results the reachable zone may no longer take, MCP-4), and
`next_request` composes it with the sources: the redacted system context (CG-1, CG-11),
the mode's offered tools and deferred catalog, and the log as provider messages (LOOP-7),
each withheld result replaced by a note. Pure functions over plain values."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from agentruns import events as ev
from agentruns.classes import DataClass, Zone, parse_zone
from agentruns.events import LogEntry
from agentruns.frozen import quick
from agentruns.gate.core import (
    SUMMARY,
    TOOL_RESULT,
    ResultSource,
    Source,
    parse_label,
    reply_source,
    withheld,
    withheld_note,
)
from agentruns.providers.base import Message, ToolSpec
from agentruns.runtime.context import effective_events, project, system_texts
from agentruns.runtime.deferred import active_deferred
from agentruns.runtime.redaction import redact
from agentruns.tools.policy import Mode, deferred_catalog, offered_tools, result_class
from agentruns.tools.registry import Tool

if TYPE_CHECKING:
    from agentruns.runtime.config import RuntimeConfig


@quick
@dataclass(frozen=True, slots=True)
class Composed:
    system: tuple[str, ...]
    # CG-11: what redaction found in the system texts, by kind (recorded once per run).
    system_redacted: dict[str, int]
    tools: tuple[Tool, ...]
    specs: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]
    sources: tuple[Source, ...] = ()  # GOV-2: what the system texts came from


def compose_request(
    *,
    sources: Sequence[Source],
    mode: Mode,
    active: Iterable[str],
    events: Sequence[LogEntry],
    messages: Sequence[Message] | None = None,
) -> Composed:
    """`events` are the effective events (after compaction); `active` the deferred tools
    the log activated; `messages`, when the caller kept them up, `project(events)`."""
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
        messages=tuple(project(events)) if messages is None else tuple(messages),
        sources=tuple(sources),
    )


def thread_mode(events: Iterable[LogEntry]) -> str | None:
    """DEF-1: the mode the thread's log last switched to; None is the default mode."""
    named = None
    for event in events:
        if isinstance(data := event.data, ev.ModeSwitched):
            named = data.mode
    return named


# A result is what its tool returned (or failed with); the loop's own refusals, denials
# and placeholders carry none of it.
TOOL_OUTPUT = (ev.OK, ev.ERROR)


def result_sources(effective: Sequence[LogEntry]) -> list[ResultSource]:
    """MCP-4: every tool result (and summary of results) of the effective context, with
    its tool's live class (`result_class`)."""
    found = []
    for event in effective:
        data = event.data
        if isinstance(data, ev.ToolResult) and data.status in TOOL_OUTPUT:
            cls = result_class(data.tool, data.data_class or "")
            found.append(ResultSource(event.sequence, TOOL_RESULT, data.tool, cls))
        elif isinstance(data, ev.Compaction) and data.results:
            found.append(_summary_source(event.sequence, data.results))
    return found


def _summary_source(sequence: int, results: Mapping[str, str]) -> ResultSource:
    classes = [(result_class(tool, recorded), tool) for tool, recorded in sorted(results.items())]
    strictest = max(classes, key=lambda pair: pair[0] or 0)
    return ResultSource(sequence, SUMMARY, strictest[1], strictest[0])


def summarised_results(events: Sequence[LogEntry]) -> dict[str, str]:
    """What a compaction records of the results it summarises: tool -> class then, so
    the summary keeps their classes (MCP-4) after the results leave the context."""
    results: dict[str, str] = {}
    for event in events:
        data = event.data
        if isinstance(data, ev.Compaction):
            results.update(data.results or {})
        elif isinstance(data, ev.ToolResult) and data.status in TOOL_OUTPUT:
            cls = result_class(data.tool, data.data_class or "")
            results[data.tool] = cls.label if cls else ""
    return results


def withhold(
    effective: Sequence[LogEntry], over: Sequence[ResultSource], zone: Zone
) -> tuple[LogEntry, ...]:
    """The effective events with each withheld result's content (a summary's text)
    replaced by its note; the log itself is untouched."""
    notes = {result.sequence: withheld_note(result, zone) for result in over}
    if not notes:
        return tuple(effective)
    replaced = []
    for event in effective:
        note = notes.get(event.sequence)
        if note is None:
            replaced.append(event)
            continue
        data = event.data
        if isinstance(data, ev.Compaction):
            data = replace(data, summary=note, withheld=True)
        elif isinstance(data, ev.ToolResult):
            data = replace(data, content=note, withheld=True)
        replaced.append(LogEntry.of(event.sequence, data, event.run_id))
    return tuple(replaced)


def reply_sources(
    log: Sequence[LogEntry], effective: Sequence[LogEntry], turns: int = 0
) -> tuple[tuple[Source, ...], int]:
    """CG-12: the labelled replies `effective` carries (and the compaction summary standing
    for earlier ones), as sources named by the thread's model turns counted from 1, and
    the count of turns after `log` (`turns`: those before it)."""
    numbers = {}
    for event in log:
        if event.type == ev.ASSISTANT:
            turns += 1
            numbers[event.sequence] = f"turn {turns}"
        elif event.type == ev.COMPACTION:
            numbers[event.sequence] = f"turns 1-{turns}"
    found = []
    for event in effective:
        label = parse_label(_label(event.data)) if event.sequence in numbers else None
        if label is not None:
            found.append(reply_source(event.sequence, numbers[event.sequence], label))
    return tuple(found), turns


def _label(data: ev.Event) -> dict[str, Any] | None:
    """CG-12: the label a reply or a summary carries."""
    if isinstance(data, ev.AssistantMessage | ev.Compaction):
        return data.label
    return None


@quick
@dataclass(frozen=True, slots=True)
class LogView:
    """What a thread's log says its next send carries, besides the sources: `effective`
    is the context after compaction with every result in `withheld` replaced by a note
    (unless the gate only observes, CG-6)."""

    effective: tuple[LogEntry, ...]
    mode: Mode
    active: frozenset[str]
    withheld: tuple[ResultSource, ...] = ()
    zone: Zone = Zone.EXTERNAL_GLOBAL
    results: tuple[ResultSource, ...] = ()
    replies: tuple[Source, ...] = ()  # CG-12: the labelled replies it carries
    turns: int = 0  # the thread's model turns so far (how replies are named)

    @property
    def ceiling(self) -> DataClass:
        return self.zone.ceiling


def log_view(
    log: Sequence[LogEntry],
    config: RuntimeConfig,
    *,
    enforce: bool = True,
    recorded: ev.SentRecord | None = None,
) -> LogView:
    """`recorded`: a past turn's own record (GOV-2, `message.assistant`'s `sent`): the
    zone it was sent to and the results it withheld, whatever the catalog says today."""
    effective = tuple(effective_events(log))
    mode = config.mode(thread_mode(log))
    active = active_deferred(effective, mode.deferred) if mode.deferred else set()
    results = tuple(result_sources(effective))
    zone = config.zone
    if recorded is None:
        over = withheld(results, zone.ceiling)
    else:
        zone, kept = parse_zone(recorded.zone), set(recorded.withheld)
        over = tuple(result for result in results if result.sequence in kept)
        enforce = True  # what it withheld is what it withheld, observing or not
    sent = withhold(effective, over, zone) if enforce else effective
    replies, turns = reply_sources(log, effective)
    return LogView(sent, mode, frozenset(active), over, zone, results, replies, turns)


def extend_view(
    view: LogView, added: Sequence[LogEntry], config: RuntimeConfig, *, enforce: bool = True
) -> LogView | None:
    """`log_view(log + added)` from `view`, the log's view under the same configuration
    and enforcement, in time proportional to `added` (the loop views its log again after
    every step). None when `added` holds a compaction or a mode switch, whose effects
    reach back over the whole log: then view the whole log again."""
    if any(event.type in (ev.COMPACTION, ev.MODE_SWITCHED) for event in added):
        return None
    results = tuple(result_sources(added))
    over = withheld(results, config.zone.ceiling)
    sent = withhold(added, over, config.zone) if enforce else tuple(added)
    deferred = view.mode.deferred
    active = view.active | active_deferred(added, deferred) if deferred else view.active
    replies, turns = reply_sources(added, added, view.turns)
    return LogView(
        view.effective + sent,
        view.mode,
        frozenset(active),
        view.withheld + over,
        config.zone,
        view.results + results,
        view.replies + replies,
        turns,
    )


def next_request(
    view: LogView, *, sources: Sequence[Source], messages: Sequence[Message] | None = None
) -> Composed:
    """`messages`: `project(view.effective)`, when the caller kept it up."""
    return compose_request(
        sources=sources,
        mode=view.mode,
        active=view.active,
        events=view.effective,
        messages=messages,
    )
