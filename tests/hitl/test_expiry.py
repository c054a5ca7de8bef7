"""HITL-7: a ticket past its deadline is resolved by the sweeper as a denial with reason
`expired`; the model sees an `expired` result on its next turn and the run goes on. A late
command gets 410 `expired`, before and after the sweeper ran. Expiry never approves."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentruns.models import Note, Run, Ticket, ToolInvocation
from agentruns.runtime.loop import execute_run
from agentruns.services.resume import ticket_expire_due
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
    resume,
    run_events,
    tool_messages,
)
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

WRITE = {"id": "call_w", "name": "notes_write", "arguments": {"title": "late", "body": "x"}}
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
ASK = {"id": "call_q", "name": "ask_user", "arguments": {"question": "n?", "schema": SCHEMA}}


def script(call):
    def reply(body, path):
        if any(m.get("role") == "tool" for m in body["messages"]):
            return {"text": "carried on without it"}
        return {"text": "", "tool_calls": [call]}

    return reply


@pytest.fixture
def approver(staff):
    return grant(staff, "approve_run")


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeProvider(api_key=KEY) as server:
        yield server


def parked(fake, user, call=WRITE, timeout=3600):
    fake.default = script(call)
    openai_configuration(
        "x", fake, allowed_tools=["notes", "ask_user"], approval_timeout_seconds=timeout
    )
    run = submit(user, "x")
    before = timezone.now()
    assert execute_run(run.pk) == "awaiting"
    return run, active_ticket(run.pk), before


def overdue(ticket):
    Ticket.objects.filter(pk=ticket.pk).update(deadline=timezone.now() - timedelta(seconds=1))


def test_hitl7_the_deadline_comes_from_the_configurations_timeout(approver, fake):
    _run, ticket, before = parked(fake, approver, timeout=120)
    assert before + timedelta(seconds=120) <= ticket.deadline
    assert ticket.deadline <= timezone.now() + timedelta(seconds=120)


def test_hitl7_the_default_timeout_is_a_day(approver, fake):
    fake.default = script(WRITE)
    config = openai_configuration("d", fake, allowed_tools=["notes"])
    assert config.approval_timeout_seconds == 24 * 3600
    run = submit(approver, "d")
    assert execute_run(run.pk) == "awaiting"
    left = active_ticket(run.pk).deadline - timezone.now()
    assert timedelta(hours=23, minutes=59) < left <= timedelta(hours=24)


def test_hitl7_the_sweeper_leaves_a_ticket_before_its_deadline(approver, fake):
    run, _ticket, _ = parked(fake, approver)
    before = picture(run.pk)
    assert ticket_expire_due() == 0
    assert picture(run.pk) == before


def test_hitl7_expiry_is_a_denial_the_model_sees_and_the_run_completes(approver, fake):
    run, ticket, _ = parked(fake, approver)
    client = client_for(approver)
    overdue(ticket)

    # Before the sweeper: the late command is refused and changes nothing.
    before = picture(run.pk)
    late = resume(client, run.pk, allow(ticket))
    assert late.status_code == 410 and late.json()["code"] == "expired"
    assert picture(run.pk) == before

    assert ticket_expire_due() == 1
    assert ticket_expire_due() == 0  # resolved once
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.EXPIRED
    assert ticket.resolved_by is None
    assert Run.objects.get(pk=run.pk).status == Run.Status.QUEUED
    decided = [e.payload for e in run_events(run.pk) if e.type == "ticket.decided"]
    assert [(d["decision"], d["by"], d["call_id"]) for d in decided] == [
        ("expired", None, "call_w")
    ]
    [result] = [e.payload for e in run_events(run.pk) if e.type == "tool.result"]
    assert (result["call_id"], result["status"]) == ("call_w", "expired")
    assert ToolInvocation.objects.get(run=run, call_id="call_w").status == "expired"

    # After the sweeper, still 410 for allow and deny alike, and nothing changes.
    before = picture(run.pk)
    for body in (allow(ticket), deny(ticket, "too late")):
        late = resume(client, run.pk, body)
        assert late.status_code == 410 and late.json()["code"] == "expired"
    assert picture(run.pk) == before

    assert execute_run(run.pk) == "completed"
    assert Run.objects.get(pk=run.pk).final_reply == "carried on without it"
    [sent] = tool_messages(fake.requests[-1].body)
    assert sent["tool_call_id"] == "call_w"
    assert sent["content"] == result["content"]
    assert "expired" in sent["content"].lower()
    assert Note.objects.count() == 0  # expiry never approves

    # After the run ended the late command is still `expired`, not something else.
    late = resume(client, run.pk, allow(ticket))
    assert late.status_code == 410 and late.json()["code"] == "expired"
    assert Note.objects.count() == 0


def test_hitl7_an_unanswered_question_expires_too(approver, fake):
    run, ticket, _ = parked(fake, approver, call=ASK)
    overdue(ticket)
    assert ticket_expire_due() == 1
    late = resume(client_for(approver), run.pk, answer(ticket, {"n": 1}))
    assert late.status_code == 410 and late.json()["code"] == "expired"
    assert execute_run(run.pk) == "completed"
    [sent] = tool_messages(fake.requests[-1].body)
    assert sent["tool_call_id"] == "call_q" and "expired" in sent["content"].lower()


def test_hitl7_a_cancelled_run_is_not_revived_by_the_sweeper(approver, fake):
    run, ticket, _ = parked(fake, approver)
    assert client_for(approver).post(f"/api/runs/{run.pk}/cancel/").status_code == 200
    overdue(ticket)
    before = picture(run.pk)
    assert ticket_expire_due() == 0
    assert picture(run.pk) == before
    assert Run.objects.get(pk=run.pk).status == Run.Status.CANCELLED
