"""MCP-2 in every process: the tools staff accepted, registered as `<server>.<tool>`, with
their pinned schema and version and their live class and effect (the tool's override,
else its server's). The set is read again only when the catalog generation moved on, so
a process that knows the generation (the executor, from its last write) pays nothing per
step; the web, which does not, reads the generation first (one query).

Every catalog write bumps the generation (agentruns.signals), so a class raised, a server
deactivated or a listing accepted reaches the next send of every run (MCP-4, HITL-10).
"""

from __future__ import annotations

import logging
import threading

from agentruns.classes import DataClass, parse_class
from agentruns.models import CatalogGeneration, McpTool
from agentruns.tools.mcp.client import Endpoint, McpCall
from agentruns.tools.mcp.listing import registry_name
from agentruns.tools.names import wire_name
from agentruns.tools.registry import REGISTRY, Effect, Tool

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_synced = -1


def pinned_tool(row: McpTool) -> Tool:
    server = row.server
    return Tool(
        name=registry_name(server.slug, row.name),
        description=row.description,
        parameters=row.input_schema,
        group=server.slug,
        # TZ-1 would read an unknown stored class as undeclared; a tool's output is never
        # undeclared, so an unreadable one counts as the strictest.
        output_class=parse_class(row.declared_class) or DataClass.SECRET,
        effect=Effect(row.declared_effect) if row.declared_effect in set(Effect) else Effect.WRITE,
        version=row.version,
        execute=McpCall(Endpoint.of(server), row.name),
        blocking=True,
    )


def sync_pinned(generation: int | None = None) -> None:
    """Register the pinned tools of active servers as of `generation` (read when None).
    Generations only grow, so a caller at an older one finds the set already as new."""
    global _synced
    if generation is not None and generation <= _synced:
        return
    with _lock:
        if generation is None:
            generation = CatalogGeneration.current()
        if generation <= _synced:
            return
        rows = McpTool.objects.filter(server__active=True).select_related("server")
        tools = [pinned_tool(row) for row in rows]
        REGISTRY.replace_pinned(tools)
        for tool in tools:
            if REGISTRY.get(tool.name) is not tool:
                logger.warning(
                    "MCP tool %s (%s) clashes; not offered", tool.name, wire_name(tool.name)
                )
        _synced = generation


def forget_pinned() -> None:
    """Drop every pinned tool and the generation they were read at (the test suite, whose
    rolled-back transactions take the generation back)."""
    global _synced
    with _lock:
        REGISTRY.replace_pinned([])
        _synced = -1
