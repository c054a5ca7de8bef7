"""MCP tool servers (MCP-1, MCP-2): register, list a server's tools for review, accept
the listing (pin it), declare a tool's class and effect. The admin and the API both call
these; every write bumps the catalog generation, so every process registers the pinned
tools anew before its next send (tools/mcp/pinned.py)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from agentruns.classes import DATA_CLASS_CHOICES
from agentruns.errors import Conflict, InvalidRequest, McpUnavailable
from agentruns.models import CatalogGeneration, McpServer, McpTool
from agentruns.models.mcp import EFFECT_CHOICES
from agentruns.services.changes import Saved, catalog_save
from agentruns.tools.mcp.client import Endpoint, Unavailable, list_tools
from agentruns.tools.mcp.listing import (
    ADDED,
    CHANGED,
    UNCHANGED,
    Change,
    difference,
    listed_tools,
    listing_digest,
    reserved_slugs,
    slug_problem,
)
from agentruns.tools.registry import REGISTRY


def mcp_slug_problem(slug: str) -> str | None:
    """A server's slug may not reach into the names of tools registered in code."""
    code = REGISTRY.in_code()
    return slug_problem(slug, reserved_slugs([t.name for t in code], [t.group for t in code]))


def _code_tool_named(name: str) -> str | None:
    tool = next((t for t in REGISTRY.in_code() if name in (t.name, t.wire_name)), None)
    return tool.name if tool else None


def mcp_server_changes(*, server: McpServer) -> list[Change]:
    """MCP-2: what accepting the server's last listing would change, tool by tool."""
    pinned = dict(server.tools.values_list("name", "version"))
    return difference(pinned, listed_tools(server.slug, server.discovered, _code_tool_named))


def mcp_server_refresh(*, server: McpServer) -> list[Change]:
    """List the server's tools now (tools/list) and keep the listing for review; nothing
    offered to a model changes until staff accept it."""
    try:
        listed = list_tools(Endpoint.of(server), timeout=server.timeout_seconds)
    except Unavailable as exc:
        raise McpUnavailable(str(exc)) from exc
    return mcp_server_review(server=server, listed=listed)


def mcp_server_review(*, server: McpServer, listed: list[dict[str, Any]]) -> list[Change]:
    """Keep a listing (tools/list's entries) for review, and the difference it makes."""
    now = timezone.now()
    # An update, not a save: a listing under review bumps no catalog generation.
    McpServer.objects.filter(pk=server.pk).update(discovered=listed, discovered_at=now)
    server.discovered, server.discovered_at = listed, now
    return mcp_server_changes(server=server)


def mcp_listing_digest(server: McpServer) -> str:
    return listing_digest(server.discovered)


def mcp_server_accept(*, server_id: int, listing: str, user: Any) -> list[Change]:
    """Pin the listing staff reviewed (`listing`: its digest): tools added or changed get
    the listed schema and a new version (approvals of the old one are then refused by
    HITL-10), removed or no longer pinnable ones are unpinned; declared classes and
    effects of the tools that stay are kept. The server's new version (GOV-1) holds them."""
    found: list[Change] = []

    def save() -> McpServer:
        found.extend(_accept(server_id, listing))
        return McpServer.objects.get(pk=server_id)

    catalog_save(kind="mcp_server", pk=server_id, user=user, save=save)
    return found


def _accept(server_id: int, listing: str) -> list[Change]:
    server = McpServer.objects.select_for_update().get(pk=server_id)
    if server.discovered_at is None:
        raise InvalidRequest("Refresh the server's tools first; there is no listing to accept.")
    if listing_digest(server.discovered) != listing:
        raise Conflict("The listing changed since it was reviewed; review it again.")
    changes = mcp_server_changes(server=server)
    for change in changes:
        if change.kind in (ADDED, CHANGED) and change.listed:
            McpTool.objects.update_or_create(
                server=server,
                name=change.name,
                defaults={
                    "description": change.listed.description,
                    "input_schema": change.listed.input_schema,
                    "version": change.listed.version,
                },
            )
        elif change.pinned_version and change.kind != UNCHANGED:
            McpTool.objects.filter(server=server, name=change.name).delete()
    McpServer.objects.filter(pk=server.pk).update(discovered=[], discovered_at=None)
    CatalogGeneration.bump()
    return changes


def mcp_tool_declare(*, tool: McpTool, output_class: str, effect: str, user: Any) -> Saved:
    """MCP-2's per-tool overrides ("" keeps the server's). A class raised here withholds
    the tool's earlier results from every later send that may not take it (MCP-4); one
    lowered is held for approval when change approval is on (GOV-3)."""
    if output_class and output_class not in {label for label, _ in DATA_CLASS_CHOICES}:
        raise InvalidRequest("Unknown data class.", fields={"output_class": ["Unknown class."]})
    if effect and effect not in {word for word, _ in EFFECT_CHOICES}:
        raise InvalidRequest("Unknown effect.", fields={"effect": ["Unknown effect."]})

    def save() -> McpServer:
        tool.output_class, tool.effect = output_class, effect
        tool.save(update_fields=["output_class", "effect"])
        return tool.server

    return catalog_save(kind="mcp_server", pk=tool.server_id, user=user, save=save)
