"""A real HTTP server on loopback that speaks Chat Completions and Messages, as strictly as
the real APIs reject bad histories, so tests exercise the official SDKs end to end.

    with FakeProvider() as fake:
        fake.queue({"text": "hi"}, {"status": 503, "message": "busy"},
                   {"tool_calls": [{"name": "notes_write", "arguments": {"title": "t"}}]})
        ... point a provider at fake.openai_base_url or fake.anthropic_base_url ...
        assert [r.path for r in fake.requests] == [...]

An item is a reply {"text", "tool_calls": [{"name", "arguments": dict | raw str, "id"}],
"thinking", "redacted_thinking", "choices" (OpenAI only, verbatim)}, an error
{"status", "message"}, either with "delay" seconds and extra response "headers" (e.g.
{"retry-after-ms": "5"}), or a callable(body, path) -> item. A "transport" key misbehaves
on the wire instead: {"reset": True} drops the connection without answering,
{"truncate": n} sends the headers and only the first n bytes of the body, {"cut": n}
sends a complete HTTP reply whose JSON body is cut after n bytes, {"trickle": s} sends
the headers and then one byte of whitespace every s seconds, never ending. An item's
"finish_reason" replaces the one rendered (e.g. "length": cut by its output bound).

`FakeProvider(server=...)` answers Chat Completions as another server does (INT-1), from
their documented behaviour: "llama.cpp" (llama-cpp-python's server) answers 500 to an
assistant message whose content is not a string, and leaves the tools out of the prompt
unless `tool_choice` is sent (its model never sees them, so a scripted tool call comes
back as text); "vllm" (started without --enable-auto-tool-choice) answers 400 to
`tool_choice: "auto"`; "ollama" ignores `tool_choice` (its documents list it unsupported).
On every other server a `tool_choice` of "none" makes a scripted tool call come back as
text, as the model may call none.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.fake_wire import (
    ANTHROPIC_PATH,
    OPENAI_PATH,
    SECRET_HEADERS,
    WIRES,
    Answer,
    Item,
    RecordedRequest,
    Rejected,
    Wire,
    openai_error,
)

__all__ = ["ANTHROPIC_PATH", "OPENAI_PATH", "FakeProvider", "RecordedRequest"]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: benchmarks would exhaust ports otherwise
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.provider._opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.provider._closed(self.connection)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        answer = self.server.provider._answer(self.path.split("?")[0], self.headers, raw)
        if answer is not None:
            self._send(*answer)

    def do_GET(self) -> None:
        self._send(404, openai_error(404, f"Unknown path {self.path}"), {}, {})

    def _send(
        self,
        status: int,
        payload: dict[str, Any],
        headers: dict[str, str],
        transport: dict[str, Any],
    ) -> None:
        data = json.dumps(payload).encode()
        if "cut" in transport:
            data = data[: int(transport["cut"])]
        if transport.get("reset"):
            # SO_LINGER 0: close() sends a TCP reset, as a crashing proxy would.
            linger = struct.pack("ii", 1, 0)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            self.close_connection = True
            self.connection.close()
            return
        length = len(data) + (10**9 if "trickle" in transport else 0)
        try:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(length))
            self.end_headers()
            if "truncate" in transport:
                self.wfile.write(data[: int(transport["truncate"])])
                self.close_connection = True
            elif "trickle" in transport:
                self._trickle(float(transport["trickle"]))
            else:
                self.wfile.write(data)
        except OSError:
            self.close_connection = True  # the client gave up (e.g. its timeout fired)

    def _trickle(self, every: float) -> None:
        """A reply that never ends: each byte well inside any per-read timeout."""
        self.close_connection = True
        while not self.server.provider._stopping.wait(every):
            self.wfile.write(b" ")
            self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    provider: FakeProvider

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client hanging up mid-reply is routine here


class FakeProvider:
    def __init__(
        self,
        *,
        default: Item | None = None,
        latency: float = 0.0,
        api_key: str | None = None,
        server: str = "openai",
    ) -> None:
        if server not in QUIRKS:
            raise ValueError(f"server is one of {', '.join(QUIRKS)}")
        self.server = server
        self.default = default
        self.latency = latency
        # When set, a request carrying any other credential gets a 401.
        self.api_key = api_key
        self._items: deque[Item] = deque()
        self._log: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._serial = itertools.count(1)
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> FakeProvider:
        if self._server is not None:
            raise RuntimeError("FakeProvider is already running")
        self._stopping.clear()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.provider = self
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-provider",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()  # wakes delayed replies so nothing outlives the test
        server.shutdown()
        server.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeProvider is not running; call start() first")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    # -- scripting and inspection

    def queue(self, *items: Item) -> None:
        with self._lock:
            self._items.extend(items)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._items)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._log)

    @property
    def paths(self) -> list[str]:
        return [request.path for request in self.requests]

    def clear(self) -> None:
        with self._lock:
            self._log.clear()
            self._items.clear()

    # -- serving

    def _opened(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.add(connection)

    def _closed(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.discard(connection)

    def _answer(self, path: str, headers: Any, raw: bytes) -> Answer | None:
        body = _json_object(raw)
        self._record(path, headers, body)
        wire = WIRES.get(path)
        if wire is None:
            return 404, openai_error(404, f"Unknown path {path}"), {}, {}
        if body is None:
            return 400, wire.error(400, "We could not parse the JSON body of your request."), {}, {}
        if not self._authorised(wire, headers):
            return 401, wire.error(401, "invalid x-api-key / missing bearer token"), {}, {}
        missing = [name for name in wire.required_headers if not headers.get(name)]
        if missing:
            return 400, wire.error(400, f"{missing[0]}: header is required"), {}, {}
        try:
            wire.validate(body)
        except Rejected as rejected:
            return 400, wire.error(400, str(rejected)), {}, {}
        except (AttributeError, TypeError, KeyError) as error:
            return 400, wire.error(400, f"Invalid request body ({type(error).__name__})."), {}, {}
        quirk = QUIRKS[self.server](body) if path == OPENAI_PATH else None
        if quirk is not None and quirk[0] >= 400:
            return quirk[0], wire.error(quirk[0], quirk[1]), {}, {}
        blind = quirk is not None or (self.server != "ollama" and _calls_forbidden(body))
        try:
            return self._reply(wire, path, body, blind=blind)
        except Exception as error:  # a broken scripted item is the test's bug: say so loudly
            return 500, wire.error(500, f"fake provider: bad item: {error!r}"), {}, {}

    def _authorised(self, wire: Wire, headers: Any) -> bool:
        credential = wire.credential(headers)
        return bool(credential) and self.api_key in (None, credential)

    def _reply(
        self, wire: Wire, path: str, body: dict[str, Any], *, blind: bool = False
    ) -> Answer | None:
        item = self._next()
        if callable(item):
            item = item(body, path)
        if blind and item.get("tool_calls"):  # the model never saw the tools
            item = {**item, "tool_calls": [], "text": item.get("text") or "I have no tools."}
        delay = float(item.get("delay") or 0) + self.latency
        if delay and self._stopping.wait(delay):
            return None
        status = int(item.get("status") or 200)
        if status >= 400:
            payload = wire.error(status, item.get("message") or f"fake HTTP {status}")
        else:
            status, payload = 200, wire.render(item, body, next(self._serial))
        return status, payload, dict(item.get("headers") or {}), dict(item.get("transport") or {})

    def _next(self) -> Item:
        with self._lock:
            if self._items:
                return self._items.popleft()
        return self.default or {"status": 500, "message": "script exhausted"}

    def _record(self, path: str, headers: Any, body: dict[str, Any] | None) -> None:
        kept = {
            name.lower(): "present" if name.lower() in SECRET_HEADERS else value
            for name, value in headers.items()
        }
        with self._lock:
            self._log.append(RecordedRequest(path, kept, body or {}))


def _calls_forbidden(body: dict[str, Any]) -> bool:
    """`tool_choice` "none" (Messages: {"type": "none"}): every API documents that the
    model then calls no tool, so a scripted tool call comes back as text."""
    choice = body.get("tool_choice")
    return choice == "none" or (isinstance(choice, dict) and choice.get("type") == "none")


def _llama_cpp(body: dict[str, Any]) -> tuple[int, str] | None:
    """llama-cpp-python's server: its request model wants a string content on every
    assistant message, and it renders tools into the prompt only for a `tool_choice`."""
    for i, message in enumerate(body.get("messages") or ()):
        if message.get("role") == "assistant" and not isinstance(message.get("content"), str):
            return 500, (
                f"7 validation errors for CreateChatCompletionRequest: messages.{i}."
                "ChatCompletionRequestAssistantMessage.content: Input should be a valid string"
            )
    if body.get("tools") and "tool_choice" not in body:
        return 200, "tools ignored"
    return None


def _vllm(body: dict[str, Any]) -> tuple[int, str] | None:
    if body.get("tool_choice") == "auto":
        return 400, (
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
        )
    return None


QUIRKS: dict[str, Callable[[dict[str, Any]], tuple[int, str] | None]] = {
    "openai": lambda body: None,
    "llama.cpp": _llama_cpp,
    "vllm": _vllm,
    "ollama": lambda body: None,
}


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw or b"null")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
