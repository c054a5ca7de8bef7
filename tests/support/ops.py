"""Helpers for the operations tests: a real HTTP receiver on loopback, a slow TCP server
(a trickling receiver, a silent or trickling mail server), and a parked run."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rest_framework.test import APIClient

from agentruns.runtime.loop import execute_run
from tests.support.catalog import make_configuration, make_provider


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """Answers each POST with the next status of `statuses` (the last one repeats)."""

    statuses: list[int]
    received: list[Received] = field(default_factory=list)
    hang: threading.Event | None = None

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                receiver.received.append(Received(dict(self.headers.items()), body))
                if receiver.hang is not None:
                    receiver.hang.wait(30)
                    return
                index = min(len(receiver.received), len(receiver.statuses)) - 1
                self.send_response(receiver.statuses[index])
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        if self.hang is not None:
            self.hang.set()
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def loopback(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A server of `handler` on a loopback port, stopped afterwards; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def refused_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


NOTE_WRITE = {"name": "notes.write", "arguments": {"title": "t", "body": "b"}}


def parked_run(user, slug: str = "ops", calls: list | None = None, **kw) -> int:
    """A scripted run that asks to write a note and parks on its ticket."""
    make_configuration(
        slug,
        provider=make_provider(f"{slug}-p", zone="local"),
        allowed_tools=["notes", "ask_user"],
        script={"turns": [{"tool_calls": calls or [NOTE_WRITE]}, {"text": "done"}]},
        **kw,
    )
    response = client_for(user).post(
        "/api/runs/", {"configuration": slug, "input": "go"}, format="json"
    )
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]
    assert execute_run(run_id) == "awaiting"
    return run_id


def answer(user, run_id: int, decision: str = "allow", note: str = "") -> None:
    client = client_for(user)
    ticket = client.get(f"/api/runs/{run_id}/").json()["ticket"]
    body = {k: ticket[k] for k in ("correlation_id", "run", "snapshot_id", "catalog_fingerprint")}
    body["call_id"] = ticket["target"]["call_id"]
    body["result"] = {"kind": "permission", "decision": decision, "note": note}
    response = client.post(f"/api/runs/{run_id}/resume/", body, format="json")
    assert response.status_code == 200, response.content


Sender = Callable[[], int]


@dataclass
class Connection:
    opened: float  # time.monotonic() when accepted
    closed: float | None = None  # when the client was seen to hang up


class SlowServer:
    """A TCP server on loopback that sends `payload` one byte every `interval` seconds on
    each connection, and nothing at all once it is sent (or with an empty payload: a mail
    server that accepts and never greets). It records when each client connected and when
    it hung up, so a test sees how long a sender held on (SEC-8)."""

    def __init__(self, payload: bytes = b"", interval: float = 0.5) -> None:
        self.payload, self.interval = payload, interval
        self.connections: list[Connection] = []
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def closed(self) -> list[Connection]:
        return [c for c in list(self.connections) if c.closed is not None]

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            record = Connection(opened=time.monotonic())
            self.connections.append(record)
            thread = threading.Thread(target=self._serve, args=(conn, record), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket, record: Connection) -> None:
        conn.settimeout(self.interval)
        left = self.payload
        with conn:
            while not self._stop.is_set():
                try:
                    if not conn.recv(65536):  # the client hung up
                        break
                except TimeoutError:
                    try:
                        if left:
                            conn.sendall(left[:1])
                            left = left[1:]
                    except OSError:
                        break
                except OSError:
                    break
            record.closed = time.monotonic()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)


# A status line that never ends: a receiver sending a byte a second would hold it for ever.
TRICKLED_HTTP = b"HTTP/1.1 200 " + b"O" * 400 + b"K\r\n\r\n"
# A greeting that never ends.
TRICKLED_SMTP = b"220 " + b"x" * 400 + b"\r\n"


def hook_owner():
    """A webhook's owner who sees every run (SEC-15: a webhook delivers only what its owner
    may see; tests/sec/test_catalog_authority.py narrows it)."""
    from django.contrib.auth import get_user_model

    owner, _ = get_user_model().objects.get_or_create(
        username="hook-owner", defaults={"is_staff": True, "is_superuser": True}
    )
    return owner
