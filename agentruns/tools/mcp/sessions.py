"""One long-lived session per MCP server and process (INT-4, PERF-11).

Opening a session costs a process start and an `initialize` round trip over stdio (1 to 4
s for the reference servers) and a handshake over HTTP; a call on an open one costs a
message. So each process keeps one session per server, on an event loop thread of its
own, and every call of every thread goes over it (MCP sessions carry concurrent requests).

A session is opened on first use and closed and opened anew when a use failed other than
by the caller's deadline (a server that died, hung up or forgot the session), when the
deployer's settings or the server's token changed, and when a stdio server's connection
ended (it exited): the SDK then stops and waits for its process, so no exited child is
left unreaped. A forked child starts with no sessions of its parent's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
from mcp import Client

from agentruns.models.mcp import McpServer
from agentruns.tools.mcp.connect import (
    Endpoint,
    Unavailable,
    headers,
    open_client,
    stdio_command,
)

T = TypeVar("T")
CHECK_SECONDS = 0.5
CLOSE_SECONDS = 30.0


@dataclass(eq=False)
class _Held:
    """A session's holder task and what its users wait on (all on the loop thread)."""

    key: Hashable
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    client: Client | None = None
    failure: BaseException | None = None
    task: asyncio.Task[None] | None = None


def _closed(client: Client) -> bool:
    """The session's connection ended (its stdio server exited): the SDK has no public
    word for it (and its ping is gone), so its dispatcher's flag is read where it exists;
    without it a dead session is found at its next use, which fails and closes it."""
    dispatcher = getattr(getattr(client, "session", None), "_dispatcher", None)
    return bool(getattr(dispatcher, "_closed", False))


def _key(endpoint: Endpoint) -> Hashable:
    """What a session was opened with: a change of any of it needs a new session."""
    if endpoint.transport == McpServer.Transport.STDIO:
        return (endpoint, stdio_command(endpoint))
    return (endpoint, tuple(sorted(headers(endpoint).items())))


class Sessions:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # Touched on the loop only: the session of each server (by slug), and every
        # holder still running, a replaced one included until its server has stopped.
        self._held: dict[str, _Held] = {}
        self._holders: set[_Held] = set()

    def holds(self, server: str) -> bool:
        """Whether a session to `server` (a slug) is open or opening: a dead server's is
        dropped within a check (CHECK_SECONDS) of its connection ending."""
        return server in self._held

    def run(self, endpoint: Endpoint, timeout: float, use: Callable[[Client], Awaitable[T]]) -> T:
        """`use(client)` on the server's session, within `timeout` (TimeoutError)."""
        future = asyncio.run_coroutine_threadsafe(
            self._use(endpoint, timeout, use), self._started()
        )
        try:
            # The loop's own deadline fires first; this one only guards a stuck loop.
            return future.result(timeout + CLOSE_SECONDS)
        except TimeoutError:
            future.cancel()
            raise

    def close(self) -> None:
        """Stop every session (each server process stopped and waited for) and the loop."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        with contextlib.suppress(TimeoutError):
            asyncio.run_coroutine_threadsafe(self._close_all(), loop).result(CLOSE_SECONDS)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CLOSE_SECONDS)
        if not thread.is_alive():
            loop.close()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="mcp-sessions", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    async def _use(
        self, endpoint: Endpoint, timeout: float, use: Callable[[Client], Awaitable[T]]
    ) -> T:
        with anyio.fail_after(timeout):
            held = await self._session(endpoint, timeout)
            assert held.client is not None
            try:
                return await use(held.client)
            except TimeoutError:
                raise  # a slow server is not a broken session
            except Exception:
                held.stop.set()  # the next use opens a new session
                raise

    async def _session(self, endpoint: Endpoint, timeout: float) -> _Held:
        key = _key(endpoint)
        held = self._held.get(endpoint.server)
        if held is not None and (
            held.key != key
            or held.stop.is_set()
            or (held.client is not None and _closed(held.client))
        ):
            held.stop.set()
            held = None
        if held is None:
            held = self._held[endpoint.server] = _Held(key)
            self._holders.add(held)
            held.task = asyncio.get_running_loop().create_task(self._hold(held, endpoint, timeout))
        try:
            await held.ready.wait()
        finally:
            if not held.ready.is_set() and held.task is not None:
                held.task.cancel()  # the first user gave up: so does the opening
        if held.client is None:
            raise held.failure or Unavailable("its session closed")
        return held

    async def _hold(self, held: _Held, endpoint: Endpoint, timeout: float) -> None:
        try:
            async with open_client(endpoint, timeout) as client:
                held.client = client
                held.ready.set()
                await self._watch(held)
        except Exception as exc:
            held.failure = exc
        finally:
            held.stop.set()
            held.ready.set()
            self._holders.discard(held)
            if self._held.get(endpoint.server) is held:
                del self._held[endpoint.server]

    async def _watch(self, held: _Held) -> None:
        """Until stopped, or until the connection ended (a stdio server that exited):
        read twice a second, so the session closes and its child is reaped at once."""
        client = held.client
        assert client is not None
        while not held.stop.is_set() and not _closed(client):
            with anyio.move_on_after(CHECK_SECONDS):
                await held.stop.wait()

    async def _close_all(self) -> None:
        held = list(self._holders)
        for one in held:
            one.stop.set()
        await asyncio.gather(*(one.task for one in held if one.task), return_exceptions=True)


SESSIONS = Sessions()


def _forget_in_child() -> None:
    # The parent's loop thread does not exist in a forked child; its sessions are the
    # parent's to close.
    global SESSIONS
    SESSIONS = Sessions()


os.register_at_fork(after_in_child=_forget_in_child)


def sessions() -> Sessions:
    return SESSIONS
