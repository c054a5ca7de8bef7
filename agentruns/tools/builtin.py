"""TOOL-6: the built-in tools."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agentruns.classes import DataClass
from agentruns.models import Note, Run
from agentruns.tools.registry import (
    DELEGATE_TOOL,
    REGISTRY,
    Effect,
    Human,
    Tool,
    ToolContext,
    ToolOutput,
)

HTTP_MAX_BYTES = 64 * 1024
# Content types besides text/* whose bytes are text a model can read.
TEXT_TYPES = {
    "application/json",
    "application/xml",
    "application/javascript",
    "application/x-www-form-urlencoded",
    "application/yaml",
    "application/x-yaml",
}
SEARCH_LIMIT = 4
SEARCH_MAX_QUERY = 200


def clock_now(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput(timezone.now().isoformat())


def notes_read(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    """SEC-10: only the notes of runs this run's initiator may see (SEC-2)."""
    initiator = Run.objects.select_related("created_by").get(pk=ctx.run_id).created_by
    titled = Note.objects.visible_to(initiator).filter(title=arguments["title"])
    notes = list(titled.order_by("-id")[:5])
    if not notes:
        return ToolOutput(f"No note titled {arguments['title']!r}.")
    return ToolOutput("\n\n".join(f"# {note.title}\n{note.body}" for note in notes))


def notes_write(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    note = Note.objects.create(
        title=arguments["title"], body=arguments["body"], run_id=ctx.run_id, call_id=ctx.call_id
    )
    return ToolOutput(f"Saved note {note.pk} titled {note.title!r}.", data={"note_id": note.pk})


def http_get(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    url = arguments["url"]
    parts = urlsplit(url)
    allowed = {host.lower() for host in settings.AGENTRUNS_HTTP_ALLOWED_HOSTS}
    if parts.scheme not in {"http", "https"} or (parts.hostname or "").lower() not in allowed:
        return ToolOutput(f"Host not allowed: {parts.hostname or url!r}.", ok=False)
    try:
        with httpx.stream("GET", url, timeout=10.0, follow_redirects=False) as response:
            body = b""
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) >= HTTP_MAX_BYTES:
                    break
    except httpx.HTTPError as exc:
        return ToolOutput(f"Request failed: {type(exc).__name__}.", ok=False)
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if not _textual(kind) or b"\x00" in body:
        # SEC-7: bytes are no text for the model (and NUL is none PostgreSQL stores).
        shown = kind or "no content type"
        return ToolOutput(
            f"HTTP {response.status_code}: binary content ({shown}) cannot be shown.", ok=False
        )
    text = body[:HTTP_MAX_BYTES].decode(response.encoding or "utf-8", errors="replace")
    return ToolOutput(f"HTTP {response.status_code}\n\n{text}", ok=response.status_code < 400)


def _textual(kind: str) -> bool:
    return (
        not kind
        or kind.startswith("text/")
        or kind in TEXT_TYPES
        or kind.endswith(("+json", "+xml"))
    )


def _words(text: str) -> set[str]:
    return {word for word in re.split(r"[^a-z0-9]+", text.lower()) if len(word) > 1}


def tool_search(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    """DEF-3: activate up to four deferred tools of the current mode; grants nothing."""
    query = arguments["query"].strip()
    if not query or len(query) > SEARCH_MAX_QUERY:
        return _search_result([], f"Give a query of 1 to {SEARCH_MAX_QUERY} characters.")
    candidates = [REGISTRY.get(name) for name in ctx.catalog if name not in ctx.active]
    tools = [tool for tool in candidates if tool is not None]
    exact = [tool for tool in tools if query in {tool.name, tool.wire_name}]
    wanted = _words(query)
    ranked = sorted(
        (tool for tool in tools if tool not in exact),
        key=lambda tool: -len(wanted & _words(f"{tool.name} {tool.description}")),
    )
    matches = exact + [t for t in ranked if wanted & _words(f"{t.name} {t.description}")]
    added = [tool.name for tool in matches[:SEARCH_LIMIT]]
    if not added:
        return _search_result([], f"No deferred tool matches {query!r}.")
    return _search_result(added, "Activated: " + ", ".join(added) + ". Call them from now on.")


def _search_result(added: list[str], message: str) -> ToolOutput:
    return ToolOutput(message, data={"added_tool_names": added})


WAIT_MAX_SECONDS = 30 * 24 * 3600


def wait_due(arguments: dict[str, Any], now: datetime) -> tuple[datetime | None, str]:
    """SCHED-3: when an `agent.wait` call is due, or why its arguments name no due time
    (a model-visible error; nothing parks)."""
    seconds, until = arguments.get("seconds"), arguments.get("until")
    if (seconds is None) == (until is None):
        return None, "Give either `seconds` or `until`, not both."
    if seconds is not None:
        return now + timedelta(seconds=seconds), ""
    moment = parse_datetime(until) if isinstance(until, str) else None
    if moment is None or moment.tzinfo is None:
        return None, f"`until` must be an ISO 8601 time with its offset, not {until!r}."
    if moment <= now:
        return None, f"`until` ({until}) is not in the future."
    if moment > now + timedelta(seconds=WAIT_MAX_SECONDS):
        return None, "`until` is more than 30 days ahead."
    return moment, ""


def agent_wait(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    raise RuntimeError("agent.wait is answered by the clock, never executed")  # pragma: no cover


def ask_user(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    raise RuntimeError("ask_user is answered by a person, never executed")  # pragma: no cover


def delegate(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    raise RuntimeError("agent.delegate is answered by a child run")  # pragma: no cover


REGISTRY.register(
    Tool(
        name="clock.now",
        description="The current date and time (UTC, ISO 8601).",
        parameters={"type": "object", "properties": {}, "additionalProperties": False},
        group="clock",
        output_class=DataClass.PUBLIC,
        effect=Effect.READ_ONLY,
        version="1",
        execute=clock_now,
    )
)
REGISTRY.register(
    Tool(
        name="notes.read",
        description="Read the notes with a given title.",
        parameters={
            "type": "object",
            "properties": {"title": {"type": "string", "minLength": 1, "maxLength": 200}},
            "required": ["title"],
            "additionalProperties": False,
        },
        group="notes",
        output_class=DataClass.INTERNAL,
        effect=Effect.READ_ONLY,
        version="1",
        execute=notes_read,
    )
)
REGISTRY.register(
    Tool(
        name="notes.write",
        description="Save a note with a title and a body.",
        parameters={
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 1, "maxLength": 200},
                "body": {"type": "string", "maxLength": 20000},
            },
            "required": ["title", "body"],
            "additionalProperties": False,
        },
        group="notes",
        output_class=DataClass.INTERNAL,
        effect=Effect.WRITE,
        version="1",
        execute=notes_write,
        transactional=True,
    )
)
REGISTRY.register(
    Tool(
        name="http.get",
        description="Fetch a web page by URL (only hosts the operator allowed).",
        parameters={
            "type": "object",
            "properties": {"url": {"type": "string", "format": "uri", "maxLength": 2000}},
            "required": ["url"],
            "additionalProperties": False,
        },
        group="http",
        output_class=DataClass.PUBLIC,
        effect=Effect.READ_ONLY,
        version="1",
        execute=http_get,
        deferred=True,
        blocking=True,
    )
)
REGISTRY.register(
    Tool(
        name="ask_user",
        description=(
            "Ask a person a question and wait for a typed answer. `schema` is a JSON Schema "
            "object describing the answer (typed properties, required, enums, bounds)."
        ),
        parameters={
            "type": "object",
            "properties": {
                "question": {"type": "string", "minLength": 1, "maxLength": 2000},
                "schema": {"type": "object"},
            },
            "required": ["question", "schema"],
            "additionalProperties": False,
        },
        group="human",
        output_class=DataClass.PUBLIC,
        effect=Effect.READ_ONLY,
        version="1",
        execute=ask_user,
        human=Human.INPUT,
    )
)
REGISTRY.register(
    Tool(
        name="agent.wait",
        description=(
            "Wait before going on: `seconds` (1 to 2592000) or `until` (ISO 8601 with an "
            "offset, at most 30 days ahead). The run sleeps without holding anything and "
            "continues by itself at that time."
        ),
        parameters={
            "type": "object",
            "properties": {
                "seconds": {"type": "integer", "minimum": 1, "maximum": WAIT_MAX_SECONDS},
                "until": {"type": "string", "maxLength": 64},
            },
            "additionalProperties": False,
        },
        group="agent",
        output_class=DataClass.PUBLIC,
        effect=Effect.READ_ONLY,
        version="1",
        execute=agent_wait,
        human=Human.TIMER,
    )
)
REGISTRY.register(
    Tool(
        name=DELEGATE_TOOL,
        description=(
            "Hand a task to another agent (one of this configuration's delegates) and wait "
            "for its final reply, which becomes this call's result."
        ),
        parameters={
            "type": "object",
            "properties": {
                "configuration": {"type": "string", "minLength": 1, "maxLength": 50},
                "task": {"type": "string", "minLength": 1, "maxLength": 20000},
            },
            "required": ["configuration", "task"],
            "additionalProperties": False,
        },
        group="agent",
        # DEL-2: the result's class is the child's, recorded with it; the tool adds none.
        output_class=DataClass.PUBLIC,
        effect=Effect.READ_ONLY,
        version="1",
        execute=delegate,
        human=Human.DELEGATION,
    )
)
REGISTRY.register(
    Tool(
        name="tool_search",
        description="Find and activate more tools by name or keywords.",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
            "additionalProperties": False,
        },
        group="tool_search",
        output_class=DataClass.PUBLIC,
        effect=Effect.READ_ONLY,
        version="1",
        execute=tool_search,
    )
)
