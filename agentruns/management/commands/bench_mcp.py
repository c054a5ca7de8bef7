"""PERF-11: an MCP call's overhead, over stdio and streamable HTTP, against the demo's
tracker (whose `get_ticket` does no work of its own, so a call's time is its overhead).
`--fresh` opens a new session for every call, as each call did before INT-4's long-lived
sessions, for comparison."""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from agentruns.cluster.process import wait_for
from agentruns.tools.mcp.client import Endpoint, call_tool
from agentruns.tools.mcp.sessions import sessions

TRACKER = "from agentruns.demo_mcp import build_tracker; build_tracker().run('stdio')"


class Command(BaseCommand):
    help = "Median overhead of an MCP call over stdio and streamable HTTP (PERF-11)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--calls", type=int, default=50)
        parser.add_argument("--fresh", action="store_true", help="a new session per call")

    def handle(self, *args: Any, **options: Any) -> None:
        settings.AGENTRUNS_MCP_STDIO_COMMANDS = {"bench": [sys.executable, "-c", TRACKER]}
        settings.AGENTRUNS_MCP_ALLOWED_HOSTS = ["127.0.0.1"]
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen(
            [sys.executable, "-m", "agentruns.demo_mcp", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(lambda: _listening(port), timeout=60, what="the demo MCP server")
            for name, endpoint in (
                ("stdio", Endpoint("bench", "stdio", command="bench")),
                ("http", Endpoint("bench-http", "streamable_http", f"http://127.0.0.1:{port}/mcp")),
            ):
                self._measure(name, endpoint, options["calls"], options["fresh"])
        finally:
            sessions().close()
            server.terminate()
            server.wait(30)

    def _measure(self, name: str, endpoint: Endpoint, calls: int, fresh: bool) -> None:
        times = []
        for _ in range(calls + 1):
            started = time.perf_counter()
            output = call_tool(endpoint, "get_ticket", {"ticket_id": "T-1"}, timeout=60)
            times.append((time.perf_counter() - started) * 1000)
            if not output.ok:
                raise CommandError(f"{name}: {output.content}")
            if fresh:
                sessions().close()
        first, rest = times[0], sorted(times[1:])
        self.stdout.write(
            f"{name:5} {'fresh session per call' if fresh else 'long-lived session'}: "
            f"median {statistics.median(rest):.1f} ms, p90 {rest[int(len(rest) * 0.9)]:.1f} ms "
            f"over {calls} calls (the first, opening the session: {first:.0f} ms)"
        )


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
