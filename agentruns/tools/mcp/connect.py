"""How a session with an MCP server is opened (MCP-1, SEC-9, SEC-11, INT-4), as plain
values: no database is needed to reach a server.

Streamable HTTP goes through SEC-9's rules: every connection is resolved and checked
(`PinnedAsyncTransport`, the async twin of the webhooks' transport) and goes to the checked
address; the bearer token comes from an allow-listed variable, read whenever a session
opens (SEC-11). A stdio server is only ever a command the deployer listed, started in the
working directory the deployer named for it (default: an empty directory of its own, never
the product's checkout) with the SDK's safe environment plus only the variables the
deployer listed for it (no secrets of this process).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import httpx2
from django.conf import settings
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from agentruns.models.mcp import McpServer, StdioCommand, mcp_key_problem, stdio_commands
from agentruns.outbound import SCHEMES, TargetRefused, checked_address, mcp_exemptions


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


# The SDK reads an answer in a task of its own and reports a refused one to the caller as
# a closed connection: the transport notes whose answer it refused, for the caller's words.
refused_answers: set[str] = set()


class CappedStream(httpx2.AsyncByteStream):
    """An answer's body, read as it arrives and refused once over MAX_ANSWER_BYTES (an
    80 MB result cost 160 MB of memory before its cut)."""

    def __init__(self, inner: Any, server: str) -> None:
        self.inner, self.server = inner, server

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > MAX_ANSWER_BYTES:
                refused_answers.add(self.server)
                raise AnswerTooLarge(f"its answer is over {MAX_ANSWER_BYTES} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class PinnedAsyncTransport(httpx2.AsyncBaseTransport):
    """SEC-9 on each connection the SDK opens: http(s) only, the host's addresses checked
    after DNS (unless the deployer exempted it), the request sent to the checked address
    with the Host header and TLS name of the host. Connections are kept alive only within
    one session's client, which talks to one server's host: none serves another host."""

    def __init__(self, server: str) -> None:
        self.server = server
        self._inner = httpx2.AsyncHTTPTransport(limits=httpx2.Limits(max_keepalive_connections=4))

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        if url.scheme not in SCHEMES:
            raise httpx2.ConnectError(f"refused: {url.scheme} is not http or https")
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
        response.stream = CappedStream(response.stream, self.server)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def headers(endpoint: Endpoint) -> dict[str, str]:
    if not endpoint.auth_env:
        return {}
    problem = mcp_key_problem(endpoint.auth_env)
    if problem:
        raise Unavailable(problem)
    value = os.environ.get(endpoint.auth_env, "")
    if not value:
        raise Unavailable(f"{endpoint.auth_env} is not set in the worker's environment")
    return {"Authorization": f"Bearer {value}"}


def stdio_command(endpoint: Endpoint) -> StdioCommand:
    command = stdio_commands().get(endpoint.command)
    if command is None:
        raise Unavailable(f"{endpoint.command!r} is not a command the deployer listed")
    return command


def stdio_parameters(name: str, command: StdioCommand) -> StdioServerParameters:
    """INT-4: the deployer's directory, else one of its own (created empty, private);
    the SDK's safe environment plus the deployer's variables."""
    cwd = Path(command.cwd) if command.cwd else Path(settings.AGENTRUNS_MCP_STDIO_ROOT) / name
    if not command.cwd:
        cwd.mkdir(mode=0o700, parents=True, exist_ok=True)
    return StdioServerParameters(
        command=command.argv[0], args=list(command.argv[1:]), cwd=cwd, env=dict(command.env)
    )


@asynccontextmanager
async def open_client(
    endpoint: Endpoint, timeout: float, auth: dict[str, str] | None = None
) -> AsyncIterator[Client]:
    """A session with the server; `auth`: the headers as read when the caller keyed it."""
    if endpoint.transport == McpServer.Transport.STDIO:
        params = stdio_parameters(endpoint.command, stdio_command(endpoint))
        async with Client(params, read_timeout_seconds=timeout, cache=None) as client:
            yield client
        return
    async with (
        httpx2.AsyncClient(
            transport=PinnedAsyncTransport(endpoint.server),
            headers=headers(endpoint) if auth is None else auth,
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
