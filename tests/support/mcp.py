"""Real MCP servers for the suite (§16): the SDK's own `MCPServer`, served over streamable
HTTP on loopback by uvicorn on a thread of the test process (`serve_http`, stopped and
joined before the test's teardown), and a stdio one (`python -m tests.support.mcp_stdio`,
which a process keeps running as its session). The tracker is the demo's
(agentruns/demo_mcp.py) plus a slow tool, a failing one and a pair that only finish
together, and it records every call it receives, so a test can count effects on the
server's side."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from agentruns.cluster.process import wait_for
from agentruns.demo_mcp import Tracker, build_tracker
from agentruns.models import McpServer
from agentruns.services.mcp import mcp_listing_digest, mcp_server_accept, mcp_server_refresh
from tests.support.servers import free_port

STDIO_COMMAND = "test-tracker"
# `-m tests.…` needs the checkout as its directory: the deployer names it (INT-4).
STDIO_COMMANDS = {
    STDIO_COMMAND: {
        "command": [sys.executable, "-m", "tests.support.mcp_stdio"],
        "cwd": str(Path(__file__).resolve().parents[2]),
    }
}
# What the failing tool says: the server's words, with a credential redaction must catch.
FAILURE = "the tracker database is down (postgres://tracker:hunter2secret@10.0.0.5/db)"


@dataclass
class LiveTracker:
    server: MCPServer
    tracker: Tracker

    def calls(self, tool: str) -> list[dict[str, Any]]:
        """The arguments of every call of `tool` the server received, in order."""
        return [arguments for name, arguments in list(self.tracker.calls) if name == tool]


def make_tracker() -> LiveTracker:
    """A fresh server (an MCPServer's HTTP session manager runs once per instance)."""
    tracker = Tracker()
    server = build_tracker(tracker)
    recorded = tracker.calls
    together = anyio.Event()
    arrived = {"count": 0}

    @server.tool()
    async def slow(seconds: float) -> str:
        """Answer after `seconds`."""
        recorded.append(("slow", {"seconds": seconds}))
        await anyio.sleep(seconds)
        return "finally"

    @server.tool()
    def fail() -> str:
        """Always fails, with the server's own words."""
        recorded.append(("fail", {}))
        raise ToolError(FAILURE)

    @server.tool()
    async def meet(name: str) -> str:
        """Answers only once a second `meet` call has arrived: calls that run one after
        the other never finish."""
        recorded.append(("meet", {"name": name}))
        arrived["count"] += 1
        if arrived["count"] >= 2:
            together.set()
        with anyio.fail_after(10):
            await together.wait()
        return f"met {name}"

    return LiveTracker(server, tracker)


@contextmanager
def serve_http(server: MCPServer, *, headers: list[dict[str, str]] | None = None) -> Iterator[str]:
    """The server's streamable HTTP app on a free loopback port; yields its URL. Request
    headers are appended to `headers` when given (what a bearer token looked like)."""
    app: Any = server.streamable_http_app(host="127.0.0.1")
    if headers is not None:
        app = _HeaderLog(app, headers)
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=2
    )
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, name=f"mcp-{port}", daemon=True)
    thread.start()
    try:
        wait_for(lambda: running.started, timeout=30, what="the MCP server to listen")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        running.should_exit = True
        thread.join(timeout=30)
        assert not thread.is_alive(), "the MCP server did not stop"


class _HeaderLog:
    def __init__(self, app: Any, seen: list[dict[str, str]]) -> None:
        self.app, self.seen = app, seen

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await self.app(scope, receive, send)


def register(slug: str, url: str = "", **fields: Any) -> McpServer:
    """A server row as staff register it (the model's rules checked, as a form does)."""
    server = McpServer(slug=slug, name=f"{slug} server", url=url, **fields)
    server.full_clean()
    server.save()
    return server


def pin(server: McpServer) -> McpServer:
    """Refresh and accept the listing, as staff would after reviewing it."""
    mcp_server_refresh(server=server)
    mcp_server_accept(server_id=server.pk, listing=mcp_listing_digest(server), user=None)
    return server
