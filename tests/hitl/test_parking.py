"""HITL-1 (parking a turn), HITL-2 (what a ticket holds), HITL-5 (allow and deny) through the
fake OpenAI server, so what reached the model is read from the recorded requests.

The turn proposes, in model order, a write, a read-only call and another write. The
read-only call runs before the run parks; the writes are asked for one ticket at a time;
the model sees all three results, in model order, only when the whole turn is answered."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.forms.models import model_to_dict
from django.utils import timezone

from agentruns.models import Checkpoint, Event, GateAudit, Note, Run, Ticket, ToolInvocation
from agentruns.runtime.config import build_runtime_config
from agentruns.runtime.loop import execute_run
from agentruns.tools.policy import catalog_fingerprint, offered_tools
from agentruns.tools.registry import digest
from tests.conftest import grant
from tests.support.catalog import KEY, KEY_ENV, openai_configuration
from tests.support.fake_provider import FakeProvider
from tests.support.hitl import (
    active_ticket,
    allow,
    client_for,
    deny,
    resume,
    run_events,
    tool_messages,
)
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

WRITE_A = {"id": "call_a", "name": "notes_write", "arguments": {"title": "a", "body": "first"}}
ECHO = {"id": "call_echo", "name": "test_echo", "arguments": {"text": "echoed"}}
WRITE_B = {"id": "call_b", "name": "notes_write", "arguments": {"title": "b", "body": "second"}}
TIMEOUT = 900


def reply(body, path):
    """The first request proposes the turn; any request carrying results gets the answer."""
    if any(m.get("role") == "tool" for m in body["messages"]):
        return {"text": "done"}
    return {"text": "", "tool_calls": [WRITE_A, ECHO, WRITE_B]}


@pytest.fixture
def approver(staff):
    return grant(staff, "approve_run")


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    # The server refuses any other credential, so a run that gets answers used the key.
    with FakeProvider(api_key=KEY, default=reply) as server:
        yield server


@pytest.fixture
def config(fake):
    return openai_configuration(
        "p", fake, allowed_tools=["notes", "test"], approval_timeout_seconds=TIMEOUT
    )


def seq(run_id, type_, call_id):
    [event] = [e for e in run_events(run_id) if e.type == type_ and e.payload["call_id"] == call_id]
    return event.sequence


def test_hitl1_read_only_calls_run_first_and_one_ticket_parks_a_leaseless_run(
    approver, fake, config
):
    run = submit(approver, "p")
    assert execute_run(run.pk) == "awaiting"
    run.refresh_from_db()
    assert run.status == Run.Status.AWAITING
    assert (run.lease_owner, run.lease_expires_at) == ("", None)
    # The read-only call already ran; neither write did.
    results = [e.payload for e in run_events(run.pk) if e.type == "tool.result"]
    assert [(r["call_id"], r["status"], r["content"]) for r in results] == [
        ("call_echo", "ok", "echoed")
    ]
    assert Note.objects.count() == 0
    # Exactly one ticket, for the first call (in model order) that needs a person.
    assert list(Ticket.objects.filter(run=run).values_list("status", "call_id")) == [
        ("active", "call_a")
    ]
    assert dict(ToolInvocation.objects.filter(run=run).values_list("call_id", "status")) == {
        "call_a": "awaiting_approval",
        "call_echo": "completed",
        "call_b": "awaiting_approval",
    }
    # Nothing was published to the model yet: it was asked once.
    assert len(fake.requests) == 1


def test_hitl1_a_parked_runs_row_caches_its_log_up_to_the_opened_ticket(approver, fake, config):
    """The run row's caches of the log (`turns`, `last_sequence`) are taken of the state
    with the step's own events folded in: a parked run's newest event is its ticket's."""
    run = submit(approver, "p")
    assert execute_run(run.pk) == "awaiting"
    run.refresh_from_db()
    newest = run_events(run.pk)[-1]
    assert newest.type == "ticket.opened"
    assert (run.turns, run.last_sequence) == (1, newest.sequence)


def test_hitl1_hitl5_mixed_decisions_reach_the_model_in_model_order(approver, fake, config):
    run = submit(approver, "p")
    client = client_for(approver)
    assert execute_run(run.pk) == "awaiting"

    ticket_a = active_ticket(run.pk)
    assert resume(client, run.pk, allow(ticket_a, "fine")).status_code == 200
    # HITL-5: the allow committed the call's move to executing, naming the approver,
    # before the tool ran.
    assert ToolInvocation.objects.get(run=run, call_id="call_a").status == "executing"
    assert Note.objects.count() == 0
    [decided] = [e for e in run_events(run.pk) if e.type == "ticket.decided"]
    assert decided.payload["decision"] == "allow"
    assert decided.payload["by"] == approver.get_username()
    assert decided.payload["call_id"] == "call_a"

    assert execute_run(run.pk) == "awaiting"
    assert list(Note.objects.values_list("title", flat=True)) == ["a"]
    ticket_b = active_ticket(run.pk)
    assert ticket_b.call_id == "call_b"
    assert Ticket.objects.filter(run=run, status="active").count() == 1
    assert len(fake.requests) == 1  # the turn is not finished: still nothing published

    assert resume(client, run.pk, deny(ticket_b, "not b, thanks")).status_code == 200
    assert execute_run(run.pk) == "completed"
    run.refresh_from_db()
    assert run.final_reply == "done"
    assert list(Note.objects.values_list("title", flat=True)) == ["a"]
    assert ToolInvocation.objects.get(run=run, call_id="call_b").status == "denied"

    # HITL-5: the allow's decision event precedes the tool's result in the log.
    assert seq(run.pk, "ticket.decided", "call_a") < seq(run.pk, "tool.result", "call_a")
    denied = [e.payload for e in run_events(run.pk) if e.type == "tool.result"][-1]
    assert denied["call_id"] == "call_b" and denied["status"] == "denied"
    assert "not b, thanks" in denied["content"]
    assert "denied" in denied["content"].lower()

    # The log recorded the echo first; the model gets the results in model order, each
    # right after the assistant message that made the calls (LOOP-7).
    assert len(fake.requests) == 2
    messages = fake.requests[1].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "tool"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["call_a", "call_echo", "call_b"]
    assert [m["tool_call_id"] for m in messages[2:]] == ["call_a", "call_echo", "call_b"]
    assert messages[2]["content"].startswith("Saved note")
    assert messages[3]["content"] == "echoed"
    assert "not b, thanks" in messages[4]["content"]


def test_hitl5_deny_never_runs_the_tool_and_the_same_run_continues(approver, fake, config):
    run = submit(approver, "p")
    client = client_for(approver)
    assert execute_run(run.pk) == "awaiting"
    assert resume(client, run.pk, deny(active_ticket(run.pk), "no a")).status_code == 200
    assert execute_run(run.pk) == "awaiting"
    assert resume(client, run.pk, deny(active_ticket(run.pk), "no b")).status_code == 200
    assert execute_run(run.pk) == "completed"
    assert Note.objects.count() == 0
    assert Run.objects.filter(thread=run.thread).count() == 1
    tool_contents = [m["content"] for m in fake.requests[-1].body["messages"][2:]]
    assert "no a" in tool_contents[0] and "no b" in tool_contents[2]


def test_hitl2_ticket_fields_and_no_credential_anywhere(approver, fake, config):
    run = submit(approver, "p")
    before = timezone.now()
    assert execute_run(run.pk) == "awaiting"
    after = timezone.now()
    client = client_for(approver)
    detail = client.get(f"/api/runs/{run.pk}/")
    assert detail.status_code == 200
    ticket = detail.json()["ticket"]

    row = active_ticket(run.pk)
    assert ticket["correlation_id"] == str(row.correlation_id)
    assert ticket["run"] == run.pk
    assert ticket["thread"] == run.thread_id
    runtime = build_runtime_config(config)
    assert ticket["snapshot_id"] == runtime.snapshot_id
    mode = runtime.mode(None)
    assert ticket["catalog_fingerprint"] == catalog_fingerprint(
        offered_tools(mode, ()), mode.deferred
    )
    assert before + timedelta(seconds=TIMEOUT) <= row.deadline <= after + timedelta(seconds=TIMEOUT)
    assert ticket["deadline"]
    target = ticket["target"]
    assert target["kind"] == "tool_permission"
    assert target["call_id"] == "call_a"
    assert target["tool"] == "notes.write"
    assert target["arguments"] == WRITE_A["arguments"]
    assert target["arguments_digest"] == digest(WRITE_A["arguments"])

    # SEC-1 / HITL-2: the key reached the wire (the server checks it) and nothing else.
    assert fake.requests[0].headers["authorization"] == "present"
    listed = client.get("/api/tickets/")
    events = client.get(f"/api/runs/{run.pk}/events/")
    stored = [
        [model_to_dict(t) for t in Ticket.objects.all()],
        list(Event.objects.values_list("payload", flat=True)),
        list(Checkpoint.objects.values_list("state", flat=True)),
        [model_to_dict(i) for i in ToolInvocation.objects.all()],
        [model_to_dict(a) for a in GateAudit.objects.all()],
        list(Run.objects.values()),
    ]
    for text in (
        detail.content.decode(),
        listed.content.decode(),
        events.content.decode(),
        json.dumps(stored, default=str),
    ):
        assert KEY not in text
    assert listed.json()["results"][0]["correlation_id"] == ticket["correlation_id"]


SECRET = "sk-live-Zx8Qw2Er4Ty6Ui8Op0As"


def parked_on_write(user, fake):
    fake.default = lambda body, path: (
        {"text": "done"}
        if any(m.get("role") == "tool" for m in body["messages"])
        else {"text": "", "tool_calls": [WRITE_A]}
    )
    openai_configuration("one", fake, allowed_tools=["notes"])
    run = submit(user, "one")
    assert execute_run(run.pk) == "awaiting"
    return run, active_ticket(run.pk)


def test_cg11_a_secret_in_an_approvers_note_is_stored_nowhere_and_never_sent(approver, fake):
    run, ticket = parked_on_write(approver, fake)
    note = f"no, and rotate {SECRET}"
    assert resume(client_for(approver), run.pk, deny(ticket, note)).status_code == 200
    assert execute_run(run.pk) == "completed"
    [sent] = tool_messages(fake.requests[-1].body)
    assert SECRET not in sent["content"]
    stored = json.dumps(
        [
            [e.payload for e in run_events(run.pk)],
            list(Ticket.objects.values_list("resolution", flat=True)),
        ]
    )
    assert SECRET not in stored
