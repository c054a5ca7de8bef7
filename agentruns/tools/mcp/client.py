"""Talking to an MCP server with the official `mcp` SDK (MCP-1, MCP-3, INT-3): list its
tools, call one, over the process's long-lived session with it (`sessions`), all of it
inside one deadline. How a session is opened (SEC-9, SEC-11, INT-4) is `connect`'s.

Whatever the server answers is hostile: its words reach the model only as a tool result,
bounded here and redacted by the loop like any tool output (CG-11).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx2
from mcp import Client, MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from agentruns.tools.mcp.connect import (
    MAX_ANSWER_BYTES,
    AnswerTooLarge,
    Endpoint,
    Unavailable,
    refused_answers,
)
from agentruns.tools.mcp.sessions import sessions
from agentruns.tools.registry import ToolContext, ToolOutput

__all__ = [
    "MAX_ANSWER_BYTES",
    "Endpoint",
    "McpCall",
    "Unavailable",
    "call_tool",
    "list_tools",
    "run_async",
]

T = TypeVar("T")
logger = logging.getLogger(__name__)
MAX_RESULT_CHARS = 64_000
MAX_PAGES = 20
MAX_LISTED = 200


def _leaf(exc: BaseException) -> BaseException:
    """The SDK runs its transports in task groups: the first real error of a group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def failure_words(endpoint: Endpoint, exc: BaseException, timeout: float) -> str:
    """Why a use of the server failed, with the server's own words where it gave some."""
    exc = _leaf(exc)
    who = f"the MCP server {endpoint.server}"
    if isinstance(exc, AnswerTooLarge) or endpoint.server in refused_answers:
        refused_answers.discard(endpoint.server)
        return f"{who} sent an answer over {MAX_ANSWER_BYTES} bytes; nothing of it was kept"
    if isinstance(exc, TimeoutError) or _code(exc) == REQUEST_TIMEOUT:
        return f"{who} did not answer within {timeout:g} s"
    if _code(exc) == CONNECTION_CLOSED:
        return f"{who} hung up (its process exited or its connection closed) before answering"
    if isinstance(exc, Unavailable):
        return f"{who} cannot be used: {exc}"
    if isinstance(exc, httpx2.TransportError | OSError):
        # What was refused or unreachable, and where a redirect pointed, is for the log:
        # these words go to a model, and through it to a provider (SEC-9's addresses).
        logger.info("%s could not be reached: %s: %s", who, type(exc).__name__, exc)
        return f"{who} could not be reached"
    if isinstance(exc, httpx2.HTTPStatusError):
        logger.info("%s answered: %s", who, exc)
        return f"{who} answered HTTP {exc.response.status_code}"
    if isinstance(exc, MCPError):
        return f"{who} answered with an error: {exc}"
    return f"{who} failed ({type(exc).__name__}: {exc})"


def _code(exc: BaseException) -> int | None:
    return exc.error.code if isinstance(exc, MCPError) else None


def lost_after_sending(exc: BaseException) -> bool:
    """INT-3: the request may have reached the server and no answer came back (it died,
    hung up or timed out), as opposed to an answer that was an error."""
    exc = _leaf(exc)
    if isinstance(exc, MCPError):
        return _code(exc) in (CONNECTION_CLOSED, REQUEST_TIMEOUT)
    return isinstance(
        exc,
        TimeoutError
        | httpx2.TransportError
        | OSError
        | anyio.BrokenResourceError
        | anyio.ClosedResourceError
        | anyio.EndOfStream,
    )


def run_async(function: Callable[[], Awaitable[T]]) -> T:
    """Run an async function to its end from synchronous code: on this thread, or on a
    thread of its own when this one already runs an event loop (a caller inside one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(function)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, function).result()


def list_tools(endpoint: Endpoint, *, timeout: float) -> list[dict[str, Any]]:
    """MCP-2's discovery: every page of `tools/list`, as plain entries; Unavailable with
    the reason when the server cannot be used."""

    async def pages(client: Client) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = []
        cursor = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            listed += [
                {"name": t.name, "description": t.description or "", "input_schema": t.input_schema}
                for t in page.tools
            ]
            cursor = page.next_cursor
            if not cursor or len(listed) >= MAX_LISTED:
                break
        return listed[:MAX_LISTED]

    try:
        return sessions().run(endpoint, timeout, pages)
    except Exception as exc:
        raise Unavailable(failure_words(endpoint, exc, timeout)) from exc


def result_text(content: list[Any], structured: Any) -> str:
    parts = []
    for block in content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(block.text))
        elif kind == "resource" and isinstance(getattr(block.resource, "text", None), str):
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind or 'unknown'} content is not shown]")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    text = "\n".join(parts)
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + " [truncated]"


def call_tool(
    endpoint: Endpoint, tool: str, arguments: dict[str, Any], *, timeout: float
) -> ToolOutput:
    """MCP-3: the server's answer as a tool output; a server that is down, slow or errs
    is an error output in words, within `timeout`, never an exception. INT-3: one that
    died, hung up or timed out after the request left is `uncertain` (the loop decides
    what that means for the tool's effect)."""
    sent = threading.Event()

    async def call(client: Client) -> Any:
        sent.set()
        return await client.call_tool(tool, arguments, read_timeout_seconds=timeout)

    try:
        result = sessions().run(endpoint, timeout, call)
    except Exception as exc:
        words = failure_words(endpoint, exc, timeout)
        if sent.is_set() and lost_after_sending(exc):
            return ToolOutput(f"Error: {words}.", ok=False, uncertain=True)
        return ToolOutput(f"Error: {words}.", ok=False)
    text = result_text(result.content, result.structured_content)
    if result.is_error:
        return ToolOutput(f"Error from the MCP server {endpoint.server}: {text}", ok=False)
    return ToolOutput(text)


@dataclass(frozen=True)
class McpCall:
    """A pinned tool's `execute`: its server's upstream tool, with the run's timeout."""

    endpoint: Endpoint
    tool: str

    def __call__(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        return call_tool(self.endpoint, self.tool, arguments, timeout=ctx.timeout_seconds)
