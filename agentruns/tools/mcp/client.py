"""Talking to an MCP server with the official `mcp` SDK (MCP-1, MCP-3): list its tools,
call one. Each use opens its own session (`mcp.Client`) and closes it, all of it inside
one deadline, so nothing of a slow server outlives the call that waited for it.

Streamable HTTP goes through SEC-9's rules: every connection is resolved and checked
(`PinnedAsyncTransport`, the async twin of the webhooks' transport) and goes to the checked
address; the bearer token comes from an allow-listed variable, read at each use (SEC-11).
A stdio server is only ever a command the deployer listed, started with the SDK's safe
environment (no secrets of this process).

Whatever the server answers is hostile: its words reach the model only as a tool result,
bounded here and redacted by the loop like any tool output (CG-11).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import httpx
import httpx2
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from agentruns.models.mcp import McpServer, mcp_key_problem, stdio_commands
from agentruns.outbound import SCHEMES, TargetRefused, checked_address, mcp_exemptions
from agentruns.tools.registry import ToolContext, ToolOutput

T = TypeVar("T")
logger = logging.getLogger(__name__)
MAX_RESULT_CHARS = 64_000
MAX_PAGES = 20
MAX_LISTED = 200


class Unavailable(Exception):
    """The server could not be used; the message says why, in words for a person."""


@dataclass(frozen=True)
class Endpoint:
    """How to reach one server, as plain values (no database needed to call it)."""

    server: str
    transport: str
    url: str = ""
    command: str = ""
    auth_env: str = ""

    @classmethod
    def of(cls, server: McpServer) -> Endpoint:
        return cls(server.slug, server.transport, server.url, server.command, server.auth_env)


# SEC-18: the most of one HTTP answer a server may send; a tool result is cut to
# MAX_RESULT_CHARS anyway, and an answer is never held whole beyond this.
MAX_ANSWER_BYTES = 1 << 20


class AnswerTooLarge(httpx2.ReadError):
    pass


class CappedStream(httpx2.AsyncByteStream):
    """An answer's body, read as it arrives and refused once over MAX_ANSWER_BYTES (an
    80 MB result cost 160 MB of memory before its cut)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > MAX_ANSWER_BYTES:
                raise AnswerTooLarge(f"its answer is over {MAX_ANSWER_BYTES} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class PinnedAsyncTransport(httpx2.AsyncBaseTransport):
    """SEC-9 on each connection the SDK opens: http(s) only, the host's addresses checked
    after DNS (unless the deployer exempted it), the request sent to the checked address
    with the Host header and TLS name of the host; no connection kept for another."""

    def __init__(self) -> None:
        self._inner = httpx2.AsyncHTTPTransport(limits=httpx2.Limits(max_keepalive_connections=0))

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        if url.scheme not in SCHEMES:
            raise httpx2.ConnectError(f"refused (SEC-9): {url.scheme} is not http or https")
        port = url.port or SCHEMES[url.scheme]
        if not mcp_exemptions().allows(url.host, port):
            try:
                address = await anyio.to_thread.run_sync(
                    checked_address, url.host, port, abandon_on_cancel=True
                )
            except (TargetRefused, httpx.ConnectError) as exc:
                raise httpx2.ConnectError(str(exc)) from exc
            if url.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": url.host}
            request.url = url.copy_with(host=str(address))
        response = await self._inner.handle_async_request(request)
        response.stream = CappedStream(response.stream)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _headers(endpoint: Endpoint) -> dict[str, str]:
    if not endpoint.auth_env:
        return {}
    problem = mcp_key_problem(endpoint.auth_env)
    if problem:
        raise Unavailable(problem)
    value = os.environ.get(endpoint.auth_env, "")
    if not value:
        raise Unavailable(f"{endpoint.auth_env} is not set in the worker's environment")
    return {"Authorization": f"Bearer {value}"}


@asynccontextmanager
async def _client(endpoint: Endpoint, timeout: float) -> AsyncIterator[Client]:
    if endpoint.transport == McpServer.Transport.STDIO:
        argv = stdio_commands().get(endpoint.command)
        if not argv:
            raise Unavailable(f"{endpoint.command!r} is not a command the deployer listed")
        params = StdioServerParameters(command=argv[0], args=argv[1:])
        async with Client(params, read_timeout_seconds=timeout, cache=None) as client:
            yield client
        return
    async with (
        httpx2.AsyncClient(
            transport=PinnedAsyncTransport(),
            headers=_headers(endpoint),
            timeout=httpx2.Timeout(timeout),
            follow_redirects=False,
        ) as http,
        Client(
            streamable_http_client(endpoint.url, http_client=http),
            read_timeout_seconds=timeout,
            cache=None,
        ) as client,
    ):
        yield client


def _leaf(exc: BaseException) -> BaseException:
    """The SDK runs its transports in task groups: the first real error of a group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def failure_words(endpoint: Endpoint, exc: BaseException, timeout: float) -> str:
    """Why a use of the server failed, with the server's own words where it gave some."""
    exc = _leaf(exc)
    who = f"the MCP server {endpoint.server}"
    if isinstance(exc, TimeoutError):
        return f"{who} did not answer within {timeout:g} s"
    if isinstance(exc, Unavailable):
        return f"{who} cannot be used: {exc}"
    if isinstance(exc, AnswerTooLarge):
        return f"{who} sent an answer over {MAX_ANSWER_BYTES} bytes; nothing of it was kept"
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


def run_async(function: Callable[[], Awaitable[T]]) -> T:
    """Run an async function to its end from synchronous code: on this thread, or on a
    thread of its own when this one already runs an event loop (a caller inside one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(function)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, function).result()


def _run(endpoint: Endpoint, timeout: float, use: Any) -> Any:
    async def bounded() -> Any:
        with anyio.fail_after(timeout):
            async with _client(endpoint, timeout) as client:
                return await use(client)

    return run_async(bounded)


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
        return list(_run(endpoint, timeout, pages))
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
    is an error output in words, within `timeout`, never an exception."""

    async def call(client: Client) -> Any:
        return await client.call_tool(tool, arguments, read_timeout_seconds=timeout)

    try:
        result = _run(endpoint, timeout, call)
    except Exception as exc:
        return ToolOutput(f"Error: {failure_words(endpoint, exc, timeout)}.", ok=False)
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
