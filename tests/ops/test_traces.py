"""OPS-7: every run traced in OpenTelemetry, received by a real OTLP/HTTP receiver on
loopback and decoded with opentelemetry-proto: one span per drive of the run, per model
turn and per tool call, parented in that order, in the GenAI semantic conventions, with
the run, configuration and gate verdict; a parked run's trace goes on after resume; no
message content unless AGENTRUNS_OTEL_CONTENT_CLASS names a class, then only what is at or
below it; Django's requests traced; nothing of the SDK loaded while tracing is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from agentruns import tracing
from agentruns.models import Event, GateAudit, Run
from agentruns.runtime.loop import execute_run
from tests.conftest import grant
from tests.support.catalog import make_openai_configuration, make_snippet
from tests.support.fake_provider import FakeProvider
from tests.support.hitl import active_ticket, allow, client_for, resume, write_call
from tests.support.otlp import OtlpReceiver, Span
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

CONTENT = (
    "gen_ai.system_instructions",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)


@pytest.fixture
def fake():
    with FakeProvider() as provider:
        yield provider


@pytest.fixture
def otlp(monkeypatch):
    monkeypatch.delenv("AGENTRUNS_OTEL_CONTENT_CLASS", raising=False)
    with OtlpReceiver() as receiver:
        yield receiver
        tracing.shutdown()


def received(receiver: OtlpReceiver) -> list[Span]:
    tracing.flush()
    return receiver.spans


def named(spans: list[Span], prefix: str) -> list[Span]:
    return [s for s in spans if s.name.startswith(prefix)]


def echo(*texts: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "test.echo", "arguments": {"text": t}} for t in texts]}


def test_ops7_run_turns_and_tool_calls_are_one_span_tree_in_the_genai_conventions(
    fake, staff, otlp
):
    tracing.configure(otlp.url, instrument_django=False)
    make_openai_configuration("traced", fake, allowed_tools=["test"], system_prompt="Be brief.")
    fake.queue(echo("one", "two"), {"text": "done"})
    run = submit(staff, "traced", "echo twice")
    assert execute_run(run.pk) == Run.Status.COMPLETED

    spans = received(otlp)
    (agent,) = named(spans, "invoke_agent")
    chats = named(spans, "chat")
    tools = named(spans, "execute_tool")
    assert (len(chats), len(tools)) == (2, 2)
    assert agent.parent_id == "" and agent.name == "invoke_agent traced"
    assert {s.trace_id for s in spans} == {agent.trace_id}
    assert all(chat.parent_id == agent.span_id for chat in chats)
    assert all(tool.parent_id == chats[0].span_id for tool in tools)  # the turn that asked
    assert agent.service == "agentruns"

    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["agentruns.run.id"] == run.pk
    assert agent.attributes["agentruns.configuration"] == "traced"
    assert agent.attributes["agentruns.outcome"] == "completed"
    assert agent.attributes["agentruns.gate.verdict"] == "undeclared"
    first = chats[0].attributes
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.provider.name"] == "openai"
    assert first["gen_ai.request.model"] == "gpt-test"
    assert first["gen_ai.response.model"] == "gpt-test"
    assert first["gen_ai.usage.input_tokens"] > 0 and first["gen_ai.usage.output_tokens"] > 0
    assert first["agentruns.run.id"] == run.pk and first["agentruns.gate.verdict"] == "undeclared"
    assert first["gen_ai.conversation.id"] == str(run.thread_id)
    turn = Event.objects.filter(run=run, type="message.assistant").order_by("sequence").first()
    calls = turn.payload["tool_calls"]
    assert [t.attributes["gen_ai.tool.call.id"] for t in tools] == [c["id"] for c in calls]
    assert {t.attributes["gen_ai.tool.name"] for t in tools} == {"test.echo"}
    assert {t.attributes["gen_ai.operation.name"] for t in tools} == {"execute_tool"}
    assert {t.attributes["agentruns.tool.status"] for t in tools} == {"ok"}
    # No content by default: not the prompt, the system prompt, a reply or a tool's words.
    assert not [k for s in spans for k in s.attributes if k in CONTENT]
    assert "echo twice" not in str([s.attributes for s in spans])


def test_ops7_the_gate_verdict_and_a_refusal_are_on_the_spans(fake, staff, otlp):
    tracing.configure(otlp.url, instrument_django=False)
    secret = make_snippet("vault", data_class="secret")
    make_openai_configuration("leaky", fake, zone="external_global", snippets=[secret])
    run = submit(staff, "leaky", "go")
    assert execute_run(run.pk) == Run.Status.FAILED
    (agent,) = named(received(otlp), "invoke_agent")
    assert agent.attributes["agentruns.gate.verdict"] == "refused"
    assert agent.attributes["error.type"] == "context_refused"
    assert "agentruns.forked_from" not in agent.attributes
    assert agent.status_code == 2  # STATUS_CODE_ERROR
    assert fake.requests == []


def test_ops7_a_fork_is_traced_as_a_run_that_names_its_original(fake, staff, otlp, api):
    tracing.configure(otlp.url, instrument_django=False)
    make_openai_configuration("again", fake)
    fake.queue({"text": "first"}, {"text": "second"})
    original = submit(staff, "again", "go")
    assert execute_run(original.pk) == Run.Status.COMPLETED
    forked = api.post(f"/api/runs/{original.pk}/fork/", {"input": "more"}, format="json")
    assert execute_run(forked.json()["id"]) == Run.Status.COMPLETED
    runs = named(received(otlp), "invoke_agent")
    (fork_span,) = [s for s in runs if s.attributes["agentruns.run.id"] == forked.json()["id"]]
    assert fork_span.attributes["agentruns.forked_from"] == original.pk


def test_ops7_content_only_at_or_below_the_class_named(fake, staff, otlp, monkeypatch):
    monkeypatch.setenv("AGENTRUNS_OTEL_CONTENT_CLASS", "internal")
    tracing.configure(otlp.url, instrument_django=False)
    open_text = make_snippet("open", data_class="public", text="OPEN-TEXT")
    closed = make_snippet("closed", data_class="confidential", text="CLOSED-TEXT")
    make_openai_configuration("mixed", fake, allowed_tools=["test"], snippets=[open_text, closed])
    make_openai_configuration("plain", fake, allowed_tools=["test"], snippets=[open_text])
    fake.queue({"text": "mixed reply"}, echo("hello"), {"text": "plain reply"})
    mixed = submit(staff, "mixed", "MIXED-PROMPT")
    assert execute_run(mixed.pk) == Run.Status.COMPLETED
    plain = submit(staff, "plain", "PLAIN-PROMPT")
    assert execute_run(plain.pk) == Run.Status.COMPLETED

    spans = received(otlp)
    by_run = {
        run.pk: [s for s in spans if s.attributes.get("agentruns.run.id") == run.pk]
        for run in (mixed, plain)
    }
    (mixed_chat,) = named(by_run[mixed.pk], "chat")
    instructions = json.loads(mixed_chat.attributes["gen_ai.system_instructions"])
    # CG-14: the closed snippet's text is held back in its part, which says so.
    assert [part["content"] for part in instructions] == ["OPEN-TEXT", "withheld: confidential"]
    # The send's class is confidential: its conversation could repeat it, so none of it
    # (CG-14: the field holds the marker).
    assert mixed_chat.attributes["gen_ai.input.messages"] == "withheld: confidential"
    assert mixed_chat.attributes["gen_ai.output.messages"] == "withheld: confidential"
    assert "CLOSED-TEXT" not in str(spans) and "MIXED-PROMPT" not in str(spans)
    # ... and audited once for the drive, naming the exporter; the plain run held nothing.
    (audit,) = GateAudit.objects.filter(verdict="withheld")
    assert (audit.run_id, audit.configuration, audit.source_kind) == (mixed.pk, "mixed", "trace")
    assert (audit.data_class, audit.ceiling) == ("confidential", "internal")
    assert audit.source_name == f"{otlp.url}/v1/traces"

    first, second = named(by_run[plain.pk], "chat")
    messages = json.loads(first.attributes["gen_ai.input.messages"])
    assert messages == [{"role": "user", "parts": [{"type": "text", "content": "PLAIN-PROMPT"}]}]
    output = json.loads(first.attributes["gen_ai.output.messages"])
    assert output[0]["parts"][0]["name"] == "test.echo"
    (tool,) = named(by_run[plain.pk], "execute_tool")
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"text": "hello"}
    assert tool.attributes["gen_ai.tool.call.result"] == "hello"
    replies = json.loads(second.attributes["gen_ai.output.messages"])
    assert replies[0]["parts"] == [{"type": "text", "content": "plain reply"}]


def test_ops7_a_parked_runs_trace_goes_on_after_resume(fake, staff, otlp):
    tracing.configure(otlp.url, instrument_django=False)
    make_openai_configuration("careful", fake, allowed_tools=["notes"])
    fake.queue({"tool_calls": [write_call("plan")]}, {"text": "written"})
    run = submit(staff, "careful", "write the plan")
    assert execute_run(run.pk) == Run.Status.AWAITING
    before = received(otlp)
    (parked,) = named(before, "invoke_agent")
    (asked,) = named(before, "chat")
    assert parked.attributes["agentruns.outcome"] == "awaiting"
    assert named(before, "execute_tool") == []

    approver = client_for(grant(staff, "approve_run"))
    assert resume(approver, run.pk, allow(active_ticket(run.pk))).status_code == 200
    assert execute_run(run.pk) == Run.Status.COMPLETED

    after = [s for s in received(otlp) if s not in before]
    (resumed,) = named(after, "invoke_agent")
    (tool,) = named(after, "execute_tool")
    (answer,) = named(after, "chat")
    assert resumed.trace_id == parked.trace_id  # the same trace
    assert (
        resumed.parent_id == parked.span_id and (parked.trace_id, parked.span_id) in resumed.links
    )
    assert resumed.attributes["agentruns.resumed"] is True
    assert tool.parent_id == asked.span_id and tool.attributes["gen_ai.tool.name"] == "notes.write"
    assert answer.parent_id == resumed.span_id


def test_ops7_cg14_a_calls_arguments_leave_in_no_span_the_tool_span_keeps_them_from(
    fake, staff, otlp, monkeypatch
):
    """Break 3: under `public`, notes.write's arguments (its class is internal) were left
    out of the tool span but carried by the chat spans that quote the call."""
    monkeypatch.setenv("AGENTRUNS_OTEL_CONTENT_CLASS", "public")
    tracing.configure(otlp.url, instrument_django=False)
    make_openai_configuration(
        "noted", fake, allowed_tools=["notes"], approval_exempt_tools=["notes.write"]
    )
    fake.queue({"tool_calls": [write_call("plan", "NOTE-BODY-7Q")]}, {"text": "written"})
    run = submit(staff, "noted", "write the plan")
    assert execute_run(run.pk) == Run.Status.COMPLETED
    assert "NOTE-BODY-7Q" in str(fake.requests[-1].body)  # the provider had it

    spans = received(otlp)
    assert "NOTE-BODY-7Q" not in str([s.attributes for s in spans])
    first, second = named(spans, "chat")
    (call,) = json.loads(first.attributes["gen_ai.output.messages"])[0]["parts"]
    assert (call["name"], call["arguments"]) == ("notes.write", "withheld: internal")
    quoted = json.loads(second.attributes["gen_ai.input.messages"])[1]["parts"][1]
    assert quoted["arguments"] == "withheld: internal"
    (tool,) = named(spans, "execute_tool")  # the tool span's fields say so too
    assert tool.attributes["gen_ai.tool.call.arguments"] == "withheld: internal"
    assert tool.attributes["gen_ai.tool.call.result"] == "withheld: internal"
    (audit,) = GateAudit.objects.filter(verdict="withheld", run_id=run.pk)
    assert (audit.source_kind, audit.data_class, audit.ceiling) == ("trace", "internal", "public")


def test_ops7_cg14_a_requests_query_string_is_not_exported(staff, otlp, client, monkeypatch):
    monkeypatch.setenv("AGENTRUNS_OTEL_CONTENT_CLASS", "internal")
    tracing.configure(otlp.url)
    client.force_login(staff)
    assert client.get("/api/runs/?q=SEARCH-SECRET-91").status_code == 200
    server = [s for s in received(otlp) if s.kind == 2]  # SPAN_KIND_SERVER
    assert server and "SEARCH-SECRET-91" not in str([s.attributes for s in server])
    assert any("withheld: secret" in str(s.attributes) for s in server)


def test_ops7_django_requests_are_traced(staff, otlp, client):
    tracing.configure(otlp.url)
    client.force_login(staff)
    assert client.get("/api/runs/").status_code == 200
    server = [s for s in received(otlp) if s.kind == 2]  # SPAN_KIND_SERVER
    assert server, [s.name for s in otlp.spans]
    assert any("/api/runs/" in str(s.attributes) or "api/runs" in s.name for s in server)


def test_ops7_nothing_of_the_sdk_is_loaded_while_tracing_is_off():
    """Off (no OTEL_EXPORTER_OTLP_ENDPOINT), the process that serves pages and drives runs
    never imports the SDK, its exporter or the instrumentation."""
    code = (
        "import sys, django; django.setup();"
        "import agentruns.runtime.loop, agentruns.api.urls, playground.urls;"
        "import agentruns.tracing as t;"
        "assert not t.enabled();"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk',"
        " 'opentelemetry.exporter', 'opentelemetry.instrumentation'))))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def statements_of_a_run(fake: FakeProvider, user: Any, slug: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    fake.queue(echo("a", "b"), echo("c", "d"), {"text": "done"})
    run = submit(user, slug, "go")
    with CaptureQueriesContext(connection) as queries:
        assert execute_run(run.pk) == Run.Status.COMPLETED
    return len(queries)


def test_ops7_tracing_costs_no_statement_per_step(fake, staff, otlp):
    """PERF-2 holds either way: off, a run makes the statements it made before tracing
    existed; on, it adds two per drive (where its trace stands, read and kept), none per
    step."""
    make_openai_configuration("counted", fake, allowed_tools=["test"])
    statements_of_a_run(fake, staff, "counted")  # the caches warm
    off = statements_of_a_run(fake, staff, "counted")
    tracing.configure(otlp.url, instrument_django=False)
    on = statements_of_a_run(fake, staff, "counted")
    assert on - off == 2


def test_ops7_cg14_withholding_is_audited_once_per_drive_not_per_span(
    fake, staff, otlp, monkeypatch
):
    """CG-14's audit of a trace costs one statement for a drive that held anything back,
    however many spans did: each of this run's three turns and four calls withholds."""
    monkeypatch.setenv("AGENTRUNS_OTEL_CONTENT_CLASS", "public")
    secret = make_snippet("ledger", data_class="confidential", text="LEDGER-TEXT")
    make_openai_configuration("held", fake, allowed_tools=["test"], snippets=[secret])
    statements_of_a_run(fake, staff, "held")  # the caches warm
    off = statements_of_a_run(fake, staff, "held")
    tracing.configure(otlp.url, instrument_django=False)
    on = statements_of_a_run(fake, staff, "held")
    assert on - off == 3  # where the trace stands, read and kept; the audit
    spans = received(otlp)
    assert len(named(spans, "chat")) == 3 and len(named(spans, "execute_tool")) == 4
    assert "LEDGER-TEXT" not in str([s.attributes for s in spans])
    audits = GateAudit.objects.filter(verdict="withheld", source_kind="trace")
    assert [a.data_class for a in audits] == ["confidential"]


def test_ops7_a_childs_run_span_is_parented_under_its_parents_tool_span_DEL_5(fake, staff, otlp):
    tracing.configure(otlp.url, instrument_django=False)
    lookup = make_openai_configuration("lookup", fake)
    triage = make_openai_configuration("triage", fake)
    triage.delegates.set([lookup])
    delegate = {
        "id": "call_del",
        "name": "agent_delegate",
        "arguments": {"configuration": "lookup", "task": "find it"},
    }
    fake.queue({"tool_calls": [delegate]}, {"text": "found"}, {"text": "triaged"})
    parent = submit(staff, "triage", "go")
    assert execute_run(parent.pk) == Run.Status.AWAITING
    child = Run.objects.get(parent=parent)
    assert execute_run(child.pk) == Run.Status.COMPLETED
    assert execute_run(parent.pk) == Run.Status.COMPLETED
    spans = received(otlp)
    (tool,) = [s for s in named(spans, "execute_tool") if "agent.delegate" in s.name]
    runs = named(spans, "invoke_agent")
    (child_span,) = [s for s in runs if s.attributes["agentruns.run.id"] == child.pk]
    assert (child_span.trace_id, child_span.parent_id) == (tool.trace_id, tool.span_id)
    assert child_span.attributes["agentruns.resumed"] is False
