"""HITL-3, HITL-4, HITL-9 over `POST /api/runs/{id}/resume/`: every check has its own code
and HTTP status (§11), the checks run in the spec's order, and a rejected command changes
nothing at all — not the ticket, the run, the log, the invocations or the wake-ups."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

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
    identity,
    picture,
    resume,
    write_call,
)
from tests.support.runs import park, submit

pytestmark = pytest.mark.django_db

STATUS = {
    "not_permitted": 403,
    "self_approval": 403,
    "not_awaiting": 409,
    "correlation_mismatch": 409,
    "run_mismatch": 409,
    "snapshot_mismatch": 409,
    "catalog_mismatch": 409,
    "call_mismatch": 409,
    "expired": 410,
    "result_kind_mismatch": 422,
    "invalid_input": 422,
}
SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer", "minimum": 1}},
    "required": ["count"],
}
ASK = {"name": "ask_user", "arguments": {"question": "How many?", "schema": SCHEMA}}


@pytest.fixture
def approver(staff):
    return grant(staff, "approve_run")


@pytest.fixture
def config(db):
    return scripted_configuration("c", [{"tool_calls": [write_call("a")]}, {"text": "done"}])


@pytest.fixture
def four_eyes(db):
    return scripted_configuration(
        "four-eyes",
        [{"tool_calls": [write_call("a")]}, {"text": "done"}],
        require_second_approver=True,
    )


@pytest.fixture
def asking(db):
    return scripted_configuration("ask", [{"tool_calls": [ASK]}, {"text": "thanks"}])


def rejected(client, run_id, body, code, *compare):
    """Post the command; it must fail with `code` and leave every given run untouched."""
    before = picture(run_id, *compare)
    response = resume(client, run_id, body)
    assert response.status_code == STATUS[code], response.json()
    assert response.json()["code"] == code, response.json()
    assert picture(run_id, *compare) == before
    return response


def assert_still_waiting(run_id, ticket):
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ACTIVE
    assert Run.objects.get(pk=run_id).status == Run.Status.AWAITING
    assert Note.objects.count() == 0


# --- one test per code ----------------------------------------------------------------------


def test_hitl9_not_permitted_for_the_initiator_without_approve_run(member, config):
    run = park(member, "c")
    ticket = active_ticket(run.pk)
    rejected(client_for(member), run.pk, allow(ticket), "not_permitted")
    assert_still_waiting(run.pk, ticket)


def test_hitl9_not_permitted_for_a_viewer_who_may_see_but_not_decide(
    approver, config, django_user_model
):
    viewer = grant(django_user_model.objects.create_user("viewer"), "view_all_runs")
    run = park(approver, "c")
    ticket = active_ticket(run.pk)
    assert client_for(viewer).get(f"/api/runs/{run.pk}/").status_code == 200
    rejected(client_for(viewer), run.pk, deny(ticket), "not_permitted")
    assert_still_waiting(run.pk, ticket)


def test_hitl3_not_awaiting_for_a_queued_run(approver, config):
    run = submit(approver, "c")
    body = {
        "correlation_id": str(uuid.uuid4()),
        "run": run.pk,
        "snapshot_id": "s",
        "catalog_fingerprint": "f",
        "call_id": "call_0_0_0",
        "result": {"kind": "permission", "decision": "allow"},
    }
    rejected(client_for(approver), run.pk, body, "not_awaiting")
    assert Run.objects.get(pk=run.pk).status == Run.Status.QUEUED


@pytest.mark.parametrize(
    ("code", "change"),
    [
        ("correlation_mismatch", {"correlation_id": "6f1c2d9e-0000-4000-8000-000000000000"}),
        ("run_mismatch", "run"),
        ("snapshot_mismatch", {"snapshot_id": "0" * 64}),
        ("catalog_mismatch", {"catalog_fingerprint": "0" * 64}),
        ("call_mismatch", {"call_id": "call_somewhere_else"}),
    ],
)
def test_hitl3_identity_mismatch_is_rejected_and_changes_nothing(approver, config, code, change):
    run = park(approver, "c")
    ticket = active_ticket(run.pk)
    change = {"run": run.pk + 1000} if change == "run" else change
    rejected(client_for(approver), run.pk, allow(ticket, **change), code)
    assert_still_waiting(run.pk, ticket)


def test_hitl3_expired_is_410_and_the_ticket_stays_for_the_sweeper(approver, config):
    run = park(approver, "c")
    ticket = active_ticket(run.pk)
    past = timezone.now() - timedelta(seconds=1)
    Ticket.objects.filter(pk=ticket.pk).update(deadline=past)
    response = rejected(client_for(approver), run.pk, allow(ticket), "expired")
    assert response.json()["detail"]
    assert_still_waiting(run.pk, ticket)
    assert ticket.deadline == past


def test_hitl3_result_kind_mismatch_input_for_a_permission_wait(approver, config):
    run = park(approver, "c")
    ticket = active_ticket(run.pk)
    rejected(client_for(approver), run.pk, answer(ticket, {"count": 1}), "result_kind_mismatch")
    assert_still_waiting(run.pk, ticket)


def test_hitl3_result_kind_mismatch_permission_for_an_input_wait(approver, asking):
    run = park(approver, "ask")
    ticket = active_ticket(run.pk)
    rejected(client_for(approver), run.pk, allow(ticket), "result_kind_mismatch")
    assert_still_waiting(run.pk, ticket)


def test_hitl3_invalid_input_names_the_field(approver, asking):
    run = park(approver, "ask")
    ticket = active_ticket(run.pk)
    response = rejected(client_for(approver), run.pk, answer(ticket, {"count": 0}), "invalid_input")
    assert set(response.json()["fields"]) == {"count"}
    assert_still_waiting(run.pk, ticket)


def test_hitl8_self_approval(approver, four_eyes):
    run = park(approver, "four-eyes")
    ticket = active_ticket(run.pk)
    rejected(client_for(approver), run.pk, allow(ticket), "self_approval")
    assert_still_waiting(run.pk, ticket)


# --- order --------------------------------------------------------------------------------


def test_hitl3_checks_run_in_the_spec_order(approver, four_eyes):
    """A command wrong everywhere gets the first code; correcting one field at a time
    walks through the rest in the spec's order, and none of them changes anything."""
    run = park(approver, "four-eyes")
    ticket = active_ticket(run.pk)
    client = client_for(approver)
    deadline = ticket.deadline
    Ticket.objects.filter(pk=ticket.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    body = {
        "correlation_id": str(uuid.uuid4()),
        "run": run.pk + 1000,
        "snapshot_id": "0" * 64,
        "catalog_fingerprint": "0" * 64,
        "call_id": "call_wrong",
        "result": {"kind": "input", "value": {"count": 1}},
    }
    right = identity(ticket)
    steps = [
        ("correlation_mismatch", {"correlation_id": right["correlation_id"]}),
        ("run_mismatch", {"run": right["run"]}),
        ("snapshot_mismatch", {"snapshot_id": right["snapshot_id"]}),
        ("catalog_mismatch", {"catalog_fingerprint": right["catalog_fingerprint"]}),
        ("expired", "deadline"),
        ("result_kind_mismatch", {"result": {"kind": "permission", "decision": "allow"}}),
        ("call_mismatch", {"call_id": right["call_id"]}),
        ("self_approval", None),
    ]
    for code, fix in steps:
        rejected(client, run.pk, body, code)
        if fix == "deadline":
            Ticket.objects.filter(pk=ticket.pk).update(deadline=deadline)
        elif fix:
            body = {**body, **fix}
    assert_still_waiting(run.pk, ticket)


def test_hitl3_call_mismatch_comes_before_invalid_input(approver, asking):
    run = park(approver, "ask")
    ticket = active_ticket(run.pk)
    client = client_for(approver)
    rejected(client, run.pk, answer(ticket, {"count": -5}, call_id="call_x"), "call_mismatch")
    rejected(client, run.pk, answer(ticket, {"count": -5}), "invalid_input")
    assert_still_waiting(run.pk, ticket)


def test_hitl9_not_permitted_comes_before_every_ticket_check(member, config):
    run = park(member, "c")
    ticket = active_ticket(run.pk)
    body = allow(ticket, correlation_id=str(uuid.uuid4()), run=run.pk + 1, call_id="x")
    rejected(client_for(member), run.pk, body, "not_permitted")
    assert_still_waiting(run.pk, ticket)


def test_hitl3_not_awaiting_comes_before_identity_checks(approver, config):
    run = park(approver, "c")
    ticket = active_ticket(run.pk)
    client = client_for(approver)
    assert resume(client, run.pk, allow(ticket)).status_code == 200
    body = allow(ticket, correlation_id=str(uuid.uuid4()), snapshot_id="x")
    rejected(client, run.pk, body, "not_awaiting")


# --- visibility, repeats, malformed bodies, other runs ------------------------------------


def test_sec2_a_run_the_caller_may_not_see_is_404(approver, config, django_user_model):
    outsider = django_user_model.objects.create_user("outsider")
    run = park(approver, "c")
    ticket = active_ticket(run.pk)
    before = picture(run.pk)
    response = resume(client_for(outsider), run.pk, allow(ticket))
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert picture(run.pk) == before


def test_hitl4_a_second_command_after_a_successful_one_is_not_awaiting(approver, config):
    run = park(approver, "c")
    ticket = active_ticket(run.pk)
    client = client_for(approver)
    first = resume(client, run.pk, allow(ticket))
    assert first.status_code == 200
    assert first.json()["status"] == Run.Status.QUEUED
    rejected(client, run.pk, allow(ticket), "not_awaiting")
    rejected(client, run.pk, deny(ticket, "changed my mind"), "not_awaiting")
    assert execute_run(run.pk) == "completed"
    rejected(client, run.pk, allow(ticket), "not_awaiting")
    assert Note.objects.count() == 1


@pytest.mark.parametrize(
    "body",
    [
        {},
        "identity-only",
        {"result": {"kind": "vote"}},
        {"result": {"kind": "permission"}},
        {"result": {"kind": "permission", "decision": "maybe"}},
        {"result": {"kind": "input"}},
        {"run": "not-a-number"},
        {"result": "allow"},
    ],
    ids=[
        "empty",
        "no-result",
        "unknown-kind",
        "no-decision",
        "bad-decision",
        "no-value",
        "run-not-int",
        "result-not-object",
    ],
)
def test_sec3_a_malformed_body_is_400_and_changes_nothing(approver, config, body):
    run = park(approver, "c")
    ticket = active_ticket(run.pk)
    base = allow(ticket)
    payload = (
        {} if body == {} else identity(ticket) if body == "identity-only" else {**base, **body}
    )
    before = picture(run.pk)
    response = resume(client_for(approver), run.pk, payload)
    assert response.status_code == 400, response.json()
    assert response.json()["code"] == "invalid"
    assert picture(run.pk) == before


def test_sec3_a_body_that_is_not_json_is_400(approver, config):
    run = park(approver, "c")
    before = picture(run.pk)
    response = resume(
        client_for(approver), run.pk, b'{"correlation_id": ', content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["code"] == "malformed"
    assert picture(run.pk) == before


def test_hitl3_another_runs_ticket_cannot_resume_this_run(approver, config):
    run_a = park(approver, "c")
    run_b = park(approver, "c")
    ticket_a, ticket_b = active_ticket(run_a.pk), active_ticket(run_b.pk)
    client = client_for(approver)
    # B's whole identity sent to A's URL: A's wait has another correlation id.
    rejected(client, run_a.pk, allow(ticket_b), "correlation_mismatch", run_b.pk)
    # A's correlation with B's run id: the run check catches it.
    rejected(client, run_a.pk, allow(ticket_a, run=run_b.pk), "run_mismatch", run_b.pk)
    assert_still_waiting(run_a.pk, ticket_a)
    assert_still_waiting(run_b.pk, ticket_b)
