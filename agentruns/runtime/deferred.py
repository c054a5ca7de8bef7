"""DEF-4, DEF-5: which deferred tools are active, rebuilt from the effective context only.

Evidence is a successful `tool_search` result (its added names), a successful result of a
deferred tool (its own name), or a compaction's carried list. Failed, refused, denied,
expired, interrupted or placeholder results count for nothing, and prose is never read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agentruns import events as ev
from agentruns.events import LogEntry
from agentruns.tools.policy import SEARCH_TOOL
from agentruns.tools.registry import REGISTRY


def active_deferred(effective: Sequence[LogEntry], catalog: Iterable[str]) -> set[str]:
    active: set[str] = set()
    for event in effective:
        data = event.data
        if isinstance(data, ev.Compaction):
            active.update(data.active_deferred)
        elif isinstance(data, ev.ToolResult) and data.status == ev.OK:
            name = data.tool
            if name == SEARCH_TOOL:
                active.update(data.added_tool_names or ())
            else:
                tool = REGISTRY.get(name)
                if tool is not None and tool.deferred:
                    active.add(name)
    return active & set(catalog)
