"""What a configuration offers and grants, and which calls need a person (TOOL-2, TOOL-5,
DEF-1, DEF-2). Pure functions over plain values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentruns.classes import DataClass, parse_class
from agentruns.tools.registry import REGISTRY, Effect, Human, Tool, digest

SEARCH_TOOL = "tool_search"
DEFAULT_MODE = "default"

UNKNOWN = "unknown"
NOT_ALLOWED = "not_allowed"
OVER_CEILING = "over_ceiling"


@dataclass(frozen=True)
class Mode:
    name: str
    core: tuple[str, ...]
    deferred: tuple[str, ...]


def modes_from(raw: Sequence[Mapping[str, Any]] | None, allowed: Iterable[str]) -> tuple[Mode, ...]:
    """DEF-1: the configured modes, the first being the default; none configured means one
    mode offering the granted tools, deferred ones behind tool_search."""
    if raw:
        return tuple(
            Mode(spec["name"], tuple(spec.get("tools") or ()), tuple(spec.get("deferred") or ()))
            for spec in raw
        )
    granted = [REGISTRY.get(name) for name in sorted(REGISTRY.expand(allowed))]
    tools = [tool for tool in granted if tool is not None and tool.name != SEARCH_TOOL]
    return (
        Mode(
            DEFAULT_MODE,
            tuple(t.name for t in tools if not t.deferred),
            tuple(t.name for t in tools if t.deferred),
        ),
    )


def tool_refusal(
    name: str, *, granted: frozenset[str], ceiling: DataClass
) -> tuple[str, str] | None:
    """TOOL-2: the first failing of unknown, not allowed, over ceiling."""
    tool = REGISTRY.get(name)
    if tool is None:
        return UNKNOWN, f"Unknown tool {name!r}."
    if name != SEARCH_TOOL and name not in granted:
        return NOT_ALLOWED, f"Tool {name!r} is not allowed for this configuration."
    if tool.output_class > ceiling:
        return OVER_CEILING, (
            f"Tool {name!r} returns {tool.output_class.label} data, above the ceiling "
            f"{ceiling.label} of this configuration's reachable zone."
        )
    return None


def granted_tools(allowed: Iterable[str]) -> list[Tool]:
    """The tools a configuration's `allowed_tools` grant (names, groups, `<server>.*`)."""
    tools = (REGISTRY.get(name) for name in sorted(REGISTRY.expand(allowed)))
    return [tool for tool in tools if tool is not None]


def result_class(tool_name: str, recorded: str = "") -> DataClass | None:
    """MCP-4: a result carries its tool's live class; a tool no longer registered (its
    server removed, say) keeps the class recorded with the result when it ran. DEL-2: a
    delegation's result carries the child run's class, which only the record knows."""
    tool = REGISTRY.get(tool_name)
    if tool is None or tool.human is Human.DELEGATION:
        return parse_class(recorded)
    return tool.output_class


PERMISSION = "permission"
INPUT = "input"
TIMER = "timer"
DELEGATION = "delegation"


def needs_human(tool: Tool, exempt: frozenset[str]) -> str | None:
    """TOOL-5: write tools need approval unless exempted; ask_user needs an answer;
    agent.wait needs its due time to come (SCHED-3); agent.delegate waits for its child
    run (DEL-1) like a call waits for a person."""
    if tool.human is Human.INPUT:
        return INPUT
    if tool.human is Human.TIMER:
        return TIMER
    if tool.human is Human.DELEGATION:
        return DELEGATION
    if tool.effect is Effect.WRITE and tool.name not in exempt:
        return PERMISSION
    return None


def offered_tools(mode: Mode, active: Iterable[str]) -> list[Tool]:
    """DEF-2: core tools, tool_search when there is a catalog, and activated deferred ones."""
    names = list(mode.core)
    if mode.deferred:
        names.append(SEARCH_TOOL)
        names.extend(name for name in mode.deferred if name in set(active))
    tools = [REGISTRY.get(name) for name in dict.fromkeys(names)]
    return [tool for tool in tools if tool is not None]


def catalog_fingerprint(tools: Iterable[Tool], deferred: Iterable[str] = ()) -> str:
    """HITL-2: a digest of the offered tools' names, versions and schemas."""
    return digest(
        {
            "tools": sorted((t.spec_digest_parts() for t in tools), key=lambda p: p[0]),
            "catalog": sorted(deferred),
        }
    )


CATALOG_LIMIT = 50


def deferred_catalog(mode: Mode) -> list[str]:
    """DEF-2: one system text with a bounded one-line entry per deferred tool; no schemas."""
    if not mode.deferred:
        return []
    tools = [REGISTRY.get(name) for name in mode.deferred[:CATALOG_LIMIT]]
    lines = [f"- {t.name}: {t.one_line(120)}" for t in tools if t is not None]
    return ["More tools exist; activate them with tool_search before use:\n" + "\n".join(lines)]
