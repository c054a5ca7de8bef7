"""HITL-6 (typed input through `ask_user`), HITL-9 (who may answer), HITL-2 (an input
ticket's target). The model is the fake OpenAI server, so the answer it received is read
from the recorded request."""

from __future__ import annotations

import json

import pytest

from agentruns.models import Note, Run, Ticket, ToolInvocation
from agentruns.runtime.loop import execute_run
from tests.conftest import grant
from tests.support.catalog import KEY, KEY_ENV, openai_configuration
from tests.support.fake_provider import FakeProvider
from tests.support.hitl import (
    active_ticket,
    allow,
    answer,
    client_for,
    deny,
    picture,
    results_by_call,
    resume,
    run_events,
    tool_messages,
)
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

SCHEMA = {
    "type": "object",
    "properties": {
        "count": {"type": "integer", "minimum": 1, "maximum": 10},
        "colour": {"type": "string", "enum": ["red", "blue"]},
        "urgent": {"type": "boolean"},
    },
    "required": ["count", "colour"],
}
QUESTION = "How many, and which colour?"
ASK = {"id": "call_ask", "name": "ask_user", "arguments": {"question": QUESTION, "schema": SCHEMA}}
WRITE = {"id": "call_w", "name": "notes_write", "arguments": {"title": "w", "body": "x"}}


def script(*first_calls):
    def reply(body, path):
        if any(m.get("role") == "tool" for m in body["messages"]):
            return {"text": "thanks"}
        return {"text": "", "tool_calls": list(first_calls)}

    return reply


@pytest.fixture
def approver(staff):
    return grant(staff, "approve_run")


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeProvider(api_key=KEY) as server:
        yield server


def parked(fake, user, *calls):
    fake.default = script(*calls)
    openai_configuration("q", fake, allowed_tools=["ask_user", "notes"])
    run = submit(user, "q")
    assert execute_run(run.pk) == "awaiting"
    return run, active_ticket(run.pk)


def test_hitl2_an_input_ticket_shows_the_question_and_schema(approver, fake):
    run, ticket = parked(fake, approver, ASK)
    shown = client_for(approver).get(f"/api/runs/{run.pk}/").json()["ticket"]
    assert shown["target"]["kind"] == "remote_input"
    assert shown["target"]["call_id"] == "call_ask"
    assert shown["target"]["question"] == QUESTION
    assert shown["target"]["schema"] == SCHEMA
    assert shown["correlation_id"] == str(ticket.correlation_id)


def test_hitl6_a_valid_answer_becomes_the_calls_result_and_reaches_the_model(approver, fake):
    run, ticket = parked(fake, approver, ASK)
    value = {"count": 3, "colour": "blue", "urgent": True}
    response = resume(client_for(approver), run.pk, answer(ticket, value))
    assert response.status_code == 200, response.json()
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ANSWERED
    result = results_by_call(run.pk)["call_ask"]
    assert result["status"] == "ok"
    assert json.loads(result["content"]) == value
    assert ToolInvocation.objects.get(run=run, call_id="call_ask").status == "completed"

    assert execute_run(run.pk) == "completed"
    assert Run.objects.get(pk=run.pk).final_reply == "thanks"
    [sent] = tool_messages(fake.requests[-1].body)
    assert sent["tool_call_id"] == "call_ask"
    assert json.loads(sent["content"]) == value


@pytest.mark.parametrize(
    ("value", "fields"),
    [
        ({"count": 0, "colour": "green"}, {"count", "colour"}),
        ({"count": 2}, {"colour"}),
        ({"count": "two", "colour": "red"}, {"count"}),
        ({"count": 2, "colour": "red", "urgent": "yes"}, {"urgent"}),
    ],
    ids=["bounds-and-enum", "missing-required", "wrong-type", "optional-wrong-type"],
)
def test_hitl6_an_invalid_value_is_422_with_per_field_errors_and_changes_nothing(
    approver, fake, value, fields
):
    run, ticket = parked(fake, approver, ASK)
    before = picture(run.pk)
    response = resume(client_for(approver), run.pk, answer(ticket, value))
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "invalid_input"
    assert set(body["fields"]) == fields
    assert all(body["fields"][name] for name in fields)
    assert picture(run.pk) == before
    assert active_ticket(run.pk).pk == ticket.pk
    assert len(fake.requests) == 1


def test_hitl6_a_non_object_value_is_invalid_input(approver, fake):
    run, ticket = parked(fake, approver, ASK)
    before = picture(run.pk)
    response = resume(client_for(approver), run.pk, answer(ticket, "three blue ones"))
    assert response.status_code == 422
    assert response.json()["code"] == "invalid_input"
    assert picture(run.pk) == before


def test_hitl3_a_permission_decision_on_an_input_wait_is_result_kind_mismatch(approver, fake):
    run, ticket = parked(fake, approver, ASK)
    before = picture(run.pk)
    for body in (allow(ticket), deny(ticket, "no")):
        response = resume(client_for(approver), run.pk, body)
        assert response.status_code == 422
        assert response.json()["code"] == "result_kind_mismatch"
    assert picture(run.pk) == before


def test_hitl9_the_initiator_without_approve_run_may_answer_input(member, fake):
    run, ticket = parked(fake, member, ASK)
    response = resume(client_for(member), run.pk, answer(ticket, {"count": 1, "colour": "red"}))
    assert response.status_code == 200, response.json()
    assert execute_run(run.pk) == "completed"


def test_hitl9_the_initiator_without_approve_run_may_not_decide_a_permission(member, fake):
    run, ticket = parked(fake, member, WRITE)
    before = picture(run.pk)
    for body in (allow(ticket), deny(ticket)):
        response = resume(client_for(member), run.pk, body)
        assert response.status_code == 403
        assert response.json()["code"] == "not_permitted"
    assert picture(run.pk) == before
    assert Note.objects.count() == 0


def test_hitl9_another_member_may_not_answer_someone_elses_question(
    member, fake, django_user_model
):
    viewer = grant(django_user_model.objects.create_user("viewer"), "view_all_runs")
    run, ticket = parked(fake, member, ASK)
    before = picture(run.pk)
    response = resume(client_for(viewer), run.pk, answer(ticket, {"count": 1, "colour": "red"}))
    assert response.status_code == 403
    assert response.json()["code"] == "not_permitted"
    assert picture(run.pk) == before


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "string"}},
        {"type": "object", "properties": {}},
        {"type": "object", "properties": {"nested": {"type": "object"}}},
        {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["m"]},
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": "one"}}},
    ],
    ids=["not-object", "no-properties", "nested-object", "required-unknown", "bad-keyword"],
)
def test_hitl6_a_model_proposing_an_invalid_schema_gets_an_error_not_a_ticket(
    approver, fake, schema
):
    bad = {"id": "call_bad", "name": "ask_user", "arguments": {"question": "?", "schema": schema}}
    fake.default = script(bad)
    openai_configuration("q", fake, allowed_tools=["ask_user"])
    run = submit(approver, "q")
    assert execute_run(run.pk) == "completed"
    assert Ticket.objects.filter(run=run).count() == 0
    assert not [e for e in run_events(run.pk) if e.type == "ticket.opened"]
    result = results_by_call(run.pk)["call_bad"]
    assert result["status"] == "error"
    [sent] = tool_messages(fake.requests[-1].body)
    assert sent["tool_call_id"] == "call_bad"
    assert sent["content"] == result["content"]


SECRET = "sk-live-Zx8Qw2Er4Ty6Ui8Op0As"


def test_cg11_a_secret_in_a_typed_answer_is_stored_nowhere_and_never_sent(approver, fake):
    schema = {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]}
    ask = {"id": "call_s", "name": "ask_user", "arguments": {"question": "Key?", "schema": schema}}
    run, ticket = parked(fake, approver, ask)
    value = {"note": f"the key is {SECRET}"}
    assert resume(client_for(approver), run.pk, answer(ticket, value)).status_code == 200
    assert execute_run(run.pk) == "completed"
    [sent] = tool_messages(fake.requests[-1].body)
    assert SECRET not in sent["content"]
    assert "[REDACTED:api_key]" in sent["content"]
    stored = json.dumps(
        [
            [e.payload for e in run_events(run.pk)],
            list(Ticket.objects.values_list("resolution", flat=True)),
            list(ToolInvocation.objects.values_list("result", flat=True)),
        ]
    )
    assert SECRET not in stored
    assert any(e.type == "secret.redacted" for e in run_events(run.pk))
