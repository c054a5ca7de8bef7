"""§11, HITL-6: the API's words agree with themselves. A resume may copy the ticket's
`target.kind` as its result's kind; a typed answer carries only the properties its question
names (closed by default), and a refused one says why in people's words."""

from __future__ import annotations

import pytest

from agentruns.demo import load_demo_data
from agentruns.models import Run
from tests.conftest import grant
from tests.support.hitl import active_ticket, client_for, identity, picture, resume
from tests.support.runs import park

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def demo():
    load_demo_data()


def copied_kind(client, run) -> dict:
    """The ticket as `GET /api/tickets/` shows it, its `target.kind` copied into the result."""
    listed = client.get("/api/tickets/").json()
    listed = listed["results"] if isinstance(listed, dict) else listed
    (ticket,) = [t for t in listed if t["run"] == run.pk]
    return ticket["target"]["kind"]


def test_a_resume_accepts_the_tickets_target_kind_as_its_result_kind(staff):
    approver = grant(staff, "approve_run")
    client = client_for(approver)
    run = park(approver, "approval-demo")
    ticket = active_ticket(run.pk)
    kind = copied_kind(client, run)
    assert kind == "tool_permission"
    body = {**identity(ticket), "result": {"kind": kind, "decision": "allow"}}
    answered = resume(client, run.pk, body)
    assert answered.status_code == 200, answered.json()
    assert Run.objects.get(pk=run.pk).status == Run.Status.QUEUED


def test_hitl6_a_typed_answer_with_a_property_the_question_does_not_name_is_refused(staff):
    client = client_for(staff)
    run = park(staff, "question-demo")
    ticket = active_ticket(run.pk)
    kind = copied_kind(client, run)
    before = picture(run.pk)
    body = {**identity(ticket), "result": {"kind": kind, "value": {"severity": "low", "extra": 1}}}
    refused = resume(client, run.pk, body)
    assert refused.status_code == 422, refused.json()
    assert refused.json()["fields"] == {"": ["Not a field of this question: extra."]}
    assert picture(run.pk) == before
    wrong = {**body, "result": {"kind": kind, "value": {"severity": "low", "hours": "abc"}}}
    assert resume(client, run.pk, wrong).json()["fields"] == {"hours": ["Give a whole number."]}
    fine = {**body, "result": {"kind": "input", "value": {"severity": "low", "hours": 3}}}
    assert resume(client, run.pk, fine).status_code == 200
