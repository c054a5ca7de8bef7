"""HITL-8 (four-eyes: the initiator may not allow their own run's call) and HITL-9 (deciding
needs `agentruns.approve_run`)."""

from __future__ import annotations

import pytest

from agentruns.models import Note, Run, Ticket
from agentruns.runtime.loop import execute_run
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.hitl import (
    active_ticket,
    allow,
    answer,
    client_for,
    deny,
    picture,
    results_by_call,
    resume,
    write_call,
)
from tests.support.runs import park

pytestmark = pytest.mark.django_db

TURNS = [{"tool_calls": [write_call("four-eyes", call_id="call_w")]}, {"text": "done"}]
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
ASK = {"id": "call_q", "name": "ask_user", "arguments": {"question": "Sure?", "schema": SCHEMA}}


@pytest.fixture
def initiator(staff):
    return grant(staff, "approve_run")


@pytest.fixture
def second(django_user_model):
    return grant(django_user_model.objects.create_user("second"), "approve_run")


@pytest.fixture
def four_eyes(db):
    return scripted_configuration("four", TURNS, require_second_approver=True)


def test_hitl8_the_initiators_allow_is_self_approval_and_changes_nothing(initiator, four_eyes):
    run = park(initiator, "four")
    ticket = active_ticket(run.pk)
    before = picture(run.pk)
    response = resume(client_for(initiator), run.pk, allow(ticket, "my own"))
    assert response.status_code == 403
    assert response.json()["code"] == "self_approval"
    assert picture(run.pk) == before
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ACTIVE
    assert execute_run(run.pk) is None  # still awaiting: nothing to claim
    assert Note.objects.count() == 0


def test_hitl8_the_initiators_deny_is_accepted(initiator, four_eyes):
    run = park(initiator, "four")
    response = resume(client_for(initiator), run.pk, deny(active_ticket(run.pk), "on second look"))
    assert response.status_code == 200, response.json()
    assert execute_run(run.pk) == "completed"
    assert results_by_call(run.pk)["call_w"]["status"] == "denied"
    assert Note.objects.count() == 0


def test_hitl8_another_approvers_allow_is_accepted(initiator, second, four_eyes):
    run = park(initiator, "four")
    ticket = active_ticket(run.pk)
    assert resume(client_for(initiator), run.pk, allow(ticket)).status_code == 403
    response = resume(client_for(second), run.pk, allow(ticket, "checked"))
    assert response.status_code == 200, response.json()
    ticket.refresh_from_db()
    assert ticket.resolved_by == second
    assert execute_run(run.pk) == "completed"
    assert list(Note.objects.values_list("title", flat=True)) == ["four-eyes"]


def test_hitl8_four_eyes_does_not_cover_input(initiator):
    scripted_configuration(
        "four-ask", [{"tool_calls": [ASK]}, {"text": "ok"}], require_second_approver=True
    )
    run = park(initiator, "four-ask")
    response = resume(client_for(initiator), run.pk, answer(active_ticket(run.pk), {"ok": True}))
    assert response.status_code == 200, response.json()
    assert execute_run(run.pk) == "completed"


def test_hitl8_without_four_eyes_the_initiator_may_allow(initiator):
    scripted_configuration("two", TURNS, require_second_approver=False)
    run = park(initiator, "two")
    assert resume(client_for(initiator), run.pk, allow(active_ticket(run.pk))).status_code == 200
    assert execute_run(run.pk) == "completed"
    assert Note.objects.count() == 1


@pytest.mark.parametrize("decision", [allow, deny])
def test_hitl9_a_user_without_approve_run_may_not_decide(
    initiator, four_eyes, django_user_model, decision
):
    viewer = grant(django_user_model.objects.create_user("viewer"), "view_all_runs")
    run = park(initiator, "four")
    before = picture(run.pk)
    response = resume(client_for(viewer), run.pk, decision(active_ticket(run.pk)))
    assert response.status_code == 403
    assert response.json()["code"] == "not_permitted"
    assert picture(run.pk) == before
    assert Run.objects.get(pk=run.pk).status == Run.Status.AWAITING
