"""SEC-7, SEC-3: values PostgreSQL cannot store — NUL, unpaired surrogates, NaN and
Infinity — arriving in a model's reply text, in its call arguments or in a tool's result
(an `http.get` of a PNG) are cleaned or refused with a model-visible error, through the
fake provider (the official SDKs on a real loopback server) on PostgreSQL. The step
statement never raises DataError and the run ends on its first attempt, never retrying
to `attempts_exhausted`."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from agentruns import events as ev
from agentruns.models import Event, Run, ToolInvocation
from agentruns.runtime.loop import execute_run
from tests.support.catalog import make_anthropic_configuration
from tests.support.crash import make_openai_configuration, provider_pairing_problems, submit
from tests.support.deferred import modes
from tests.support.fake_provider import FakeProvider
from tests.support.ops import loopback

pytestmark = pytest.mark.django_db

# A PNG's first bytes: the signature, then an IHDR chunk, whose length holds NUL bytes.
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"


@pytest.fixture
def fake():
    with FakeProvider() as server:
        yield server


def ended_on_first_attempt(run: Run, status: str = Run.Status.COMPLETED) -> Run:
    run.refresh_from_db()
    assert run.status == status, run.failure
    assert run.attempts == 0  # counts reclaims: none was needed
    return run


def tool_results(run: Run) -> list[dict[str, Any]]:
    return [
        e.payload for e in Event.objects.filter(run=run, type=ev.TOOL_RESULT).order_by("sequence")
    ]


def results_sent_back(fake: FakeProvider) -> list[str]:
    """The tool messages of the last request: what the model was told."""
    return [m["content"] for m in fake.requests[-1].body["messages"] if m["role"] == "tool"]


def one_call(staff, fake: FakeProvider, call: dict[str, Any]) -> tuple[Run, dict[str, Any], str]:
    """A run whose model makes `call`, then answers: the run on its first attempt, the
    call's result and what the model was told of it."""
    fake.queue({"tool_calls": [call]}, {"text": "understood"})
    run = submit(staff, "c")
    assert execute_run(run.pk) == Run.Status.COMPLETED
    run = ended_on_first_attempt(run)
    [result] = tool_results(run)
    [sent] = results_sent_back(fake)
    return run, result, sent


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param("before\x00after", "before\ufffdafter", id="NUL"),
        pytest.param("half \ud83d of an emoji", "half \ufffd of an emoji", id="lone-surrogate"),
        pytest.param("\udc00\ud800", "\ufffd\ufffd", id="reversed-pair"),
    ],
)
@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_sec7_reply_text_postgresql_cannot_store_is_cleaned(staff, fake, wire, text, shown):
    if wire == "openai":
        make_openai_configuration("c", fake)
    else:
        make_anthropic_configuration("c", fake)
    fake.queue({"text": text})
    run = submit(staff, "c")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    run = ended_on_first_attempt(run)
    assert run.final_reply == shown
    [reply] = Event.objects.filter(run=run, type=ev.ASSISTANT)
    assert reply.payload["text"] == shown


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        pytest.param({"text": "a\x00b"}, "NUL", id="NUL"),
        pytest.param({"te\x00xt": "a"}, "NUL", id="NUL-in-a-key"),
        pytest.param({"text": "a\ud800b"}, "unpaired surrogate", id="lone-surrogate"),
        pytest.param('{"text": NaN}', "not a finite number", id="NaN"),
        pytest.param('{"text": "x", "n": [Infinity, -Infinity]}', "not a finite", id="Infinity"),
        pytest.param('{"text": "x", "n": 1e999}', "not a finite", id="overflow"),
    ],
)
def test_sec7_call_arguments_postgresql_cannot_store_are_a_model_visible_error(
    staff, fake, arguments, problem
):
    """The call is refused with an error result the model reads (nothing runs); its
    arguments are stored cleaned, so the history still replays as a valid turn."""
    make_openai_configuration("c", fake, allowed_tools=["test.echo"])

    run, result, sent = one_call(
        staff, fake, {"id": "c1", "name": "test_echo", "arguments": arguments}
    )

    assert result["status"] == ev.ERROR
    assert problem in result["content"] and problem in sent
    assert not ToolInvocation.objects.filter(run=run).exists()
    [turn] = Event.objects.filter(run=run, type=ev.ASSISTANT).order_by("sequence")[:1]
    stored = json.dumps(turn.payload)  # what PostgreSQL accepted is plain JSON
    assert "\\u0000" not in stored and "NaN" not in stored and "Infinity" not in stored
    assert provider_pairing_problems(run.pk) == []


def test_sec7_unstorable_call_ids_and_names_are_cleaned_too(staff, fake):
    make_openai_configuration("c", fake, allowed_tools=["test.echo"])
    call = {"id": "c\x001", "name": "test_echo\x00", "arguments": {"text": "x"}}
    fake.queue({"tool_calls": [call]}, {"text": "ok"})
    run = submit(staff, "c")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    ended_on_first_attempt(run)
    [result] = tool_results(run)
    assert result["status"] in (ev.ERROR, ev.REFUSED)
    assert provider_pairing_problems(run.pk) == []


class _Png(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        kind = "text/plain" if self.path == "/mislabelled" else "image/png"
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(PNG)))
        self.end_headers()
        self.wfile.write(PNG)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.parametrize("path", ["/logo.png", "/mislabelled"])
def test_sec7_an_http_get_of_a_png_is_a_model_visible_error(staff, fake, settings, path):
    """Binary content (by its type, or NUL bytes under a text type) is refused by the
    tool with a result the model reads; the invocation row stores it too."""
    settings.AGENTRUNS_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    make_openai_configuration(
        "c", fake, allowed_tools=["http.get"], modes=modes(agent=(["http.get"], []))
    )
    with loopback(_Png) as base:
        call = {"id": "c1", "name": "http_get", "arguments": {"url": base + path}}
        run, result, sent = one_call(staff, fake, call)

    assert result["status"] == ev.ERROR
    assert "binary" in result["content"] and "binary" in sent
    assert ToolInvocation.objects.get(run=run).status == ToolInvocation.Status.FAILED


def test_sec7_any_tool_result_postgresql_cannot_store_is_cleaned(staff, fake):
    """The floor under every tool (the suite's `test.echo` repeats what it is given, so
    a result can hold what the arguments could not): NUL in a result never reaches the
    store."""
    from agentruns.runtime.storable import storable_output
    from agentruns.tools.registry import ToolOutput

    cleaned = storable_output(ToolOutput("a\x00b\ud800", data={"k\x00": [float("nan")]}))
    assert cleaned.content == "a\ufffdb\ufffd"
    assert cleaned.data == {"k\ufffd": [None]}
