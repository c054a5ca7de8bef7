"""Helpers for the deferred-tool and compaction tests (§9 DEF-1..DEF-6).

Test-only deferred tools (group `deftest`, registered on import), a tiny loopback HTTP
server for a successful `http.get`, a fake-provider script that answers summary requests
apart from turn requests, and readers for what each recorded provider request carried.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from agentruns.classes import DataClass
from agentruns.models import Event
from agentruns.runtime.actions.compact import SUMMARY_INSTRUCTION
from agentruns.tools.registry import REGISTRY, Effect, Tool, ToolContext, ToolOutput
from tests.support.fake_provider import FakeProvider, RecordedRequest
from tests.support.ops import loopback

OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": {}}
LONG_DESCRIPTION = (
    "Render   a very detailed\n\nreport about every ledger entry, "
    + "with an explanation of each column and each footnote, " * 6
    + "ending here."
)
# A property name that only the tool's schema contains: its absence proves no schema leaked.
SCHEMA_MARKER = "zebra_marker_field"


def _ok(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput(f"ok {sorted(arguments.items())}")


def _broken(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    raise RuntimeError("deftest.broken always fails")


def _tool(name: str, description: str, **kw: Any) -> Tool:
    kw.setdefault("parameters", OBJECT)
    kw.setdefault("effect", Effect.READ_ONLY)
    kw.setdefault("execute", _ok)
    return Tool(
        name=name,
        description=description,
        group="deftest",
        output_class=DataClass.PUBLIC,
        version="1",
        deferred=True,
        **kw,
    )


LEDGER_TOOLS = [f"deftest.ledger_{letter}" for letter in "abcdef"]

TEST_TOOLS = [
    *[_tool(name, f"Ledger lookup number {i}.") for i, name in enumerate(LEDGER_TOOLS)],
    _tool("deftest.weather", "Forecast the weather for a city."),
    _tool(
        "deftest.verbose",
        LONG_DESCRIPTION,
        parameters={
            "type": "object",
            "properties": {SCHEMA_MARKER: {"type": "string"}},
            "additionalProperties": False,
        },
    ),
    _tool("deftest.publish", "Publish a bulletin to the board.", effect=Effect.WRITE),
    _tool("deftest.broken", "Calibrate the flux sensor.", execute=_broken),
]
for _t in TEST_TOOLS:
    REGISTRY.register(_t)


# ---------------------------------------------------------------- the fake provider


def is_summary(body: dict[str, Any]) -> bool:
    """A compaction's summary request, on either wire (OpenAI or Anthropic)."""
    return body.get("system") == SUMMARY_INSTRUCTION or any(
        m.get("role") == "system" and m.get("content") == SUMMARY_INSTRUCTION
        for m in body.get("messages") or ()
    )


class Script:
    """The fake server's default item: summary requests get `summary`, turn requests get
    the next scripted turn (then `final`). A turn may be a callable(body) -> item."""

    def __init__(self, *turns: Any, summary: str = "SUMMARY-TEXT", final: str = "done") -> None:
        self.turns: deque[Any] = deque(turns)
        self.summary = summary
        self.final = final
        self.lock = threading.Lock()
        self.server: FakeProvider | None = None  # set by whoever serves it, if useful

    def add(self, *turns: Any) -> None:
        with self.lock:
            self.turns.extend(turns)

    def __call__(self, body: dict[str, Any], path: str) -> dict[str, Any]:
        if is_summary(body):
            return {"text": self.summary}
        with self.lock:
            turn = self.turns.popleft() if self.turns else {"text": self.final}
        return turn(body) if callable(turn) else turn


@contextmanager
def fake_server(*turns: Any, **kw: Any) -> Iterator[tuple[FakeProvider, Script]]:
    script = Script(*turns, **kw)
    with FakeProvider(default=script) as fake:
        yield fake, script


def call(name: str, arguments: dict[str, Any] | None = None, id: str | None = None) -> dict:
    """A scripted tool call as the model sends it (wire name)."""
    item: dict[str, Any] = {"name": name.replace(".", "_"), "arguments": arguments or {}}
    if id:
        item["id"] = id
    return item


def turn(*calls: dict, text: str = "") -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


def search(query: Any, id: str | None = None) -> dict[str, Any]:
    return turn(call("tool_search", {"query": query}, id=id))


def modes(**spec: tuple[list[str], list[str]]) -> list[dict[str, Any]]:
    """modes(agent=(core, deferred), chat=(...)) in the stored (list) shape."""
    return [{"name": n, "tools": list(c), "deferred": list(d)} for n, (c, d) in spec.items()]


# ---------------------------------------------------------------- what requests carried


def turn_requests(fake: FakeProvider) -> list[RecordedRequest]:
    return [r for r in fake.requests if not is_summary(r.body)]


def summary_requests(fake: FakeProvider) -> list[RecordedRequest]:
    return [r for r in fake.requests if is_summary(r.body)]


def offered(request: RecordedRequest | dict[str, Any]) -> list[str]:
    body = request.body if isinstance(request, RecordedRequest) else request
    return [tool["function"]["name"] for tool in body.get("tools") or ()]


def system_of(request: RecordedRequest | dict[str, Any]) -> list[str]:
    body = request.body if isinstance(request, RecordedRequest) else request
    return [m["content"] for m in body["messages"] if m["role"] == "system"]


def tool_results(run_id: int) -> list[dict[str, Any]]:
    rows = Event.objects.filter(run_id=run_id, type="tool.result").order_by("sequence")
    return [row.payload for row in rows]


def thread_events(thread_id: int) -> list[Event]:
    return list(Event.objects.filter(thread_id=thread_id).order_by("sequence"))


# ---------------------------------------------------------------- a page for http.get


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        data = b"PAGE-CONTENT"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def page_server() -> Iterator[str]:
    """A loopback page for a successful http.get; yields its URL."""
    with loopback(_Page) as base:
        yield f"{base}/page"
