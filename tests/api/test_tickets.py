"""`GET /api/tickets/` (§11, HITL-9): the active tickets the caller may act on. Approvers see
permission and input tickets of every run; an initiator without `approve_run` sees only
the input tickets of their own runs; answered, void and expired tickets are not listed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentruns.models import Ticket
from agentruns.services.resume import ticket_expire_due
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.hitl import active_ticket, allow, answer, client_for, resume, write_call
from tests.support.runs import park

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
ASK = {"name": "ask_user", "arguments": {"question": "n?", "schema": SCHEMA}}


@pytest.fixture(autouse=True)
def configs(db):
    scripted_configuration("write", [{"tool_calls": [write_call("w")]}, {"text": "done"}])
    scripted_configuration("ask", [{"tool_calls": [ASK]}, {"text": "done"}])


@pytest.fixture
def approver(django_user_model):
    return grant(django_user_model.objects.create_user("approver"), "approve_run")


@pytest.fixture
def other(django_user_model):
    return django_user_model.objects.create_user("other")


def listed(user):
    response = client_for(user).get("/api/tickets/")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["count"] == len(body["results"])
    return {(row["run"], row["target"]["kind"]) for row in body["results"]}


@pytest.fixture
def tickets(member, other):
    """Each of two members has one run waiting for a permission and one for input."""
    return {
        (user.username, config): park(user, config).pk
        for user in (member, other)
        for config in ("write", "ask")
    }


def test_approvers_see_permission_and_input_tickets_of_every_run(approver, tickets):
    assert listed(approver) == {
        (tickets["member", "write"], "tool_permission"),
        (tickets["member", "ask"], "remote_input"),
        (tickets["other", "write"], "tool_permission"),
        (tickets["other", "ask"], "remote_input"),
    }


def test_an_initiator_without_approve_run_sees_only_their_own_input_tickets(member, tickets):
    assert listed(member) == {(tickets["member", "ask"], "remote_input")}


def test_seeing_every_run_is_not_enough_to_be_listed_a_permission(tickets, django_user_model):
    viewer = grant(django_user_model.objects.create_user("viewer"), "view_all_runs")
    assert listed(viewer) == set()


def test_a_listed_ticket_carries_what_a_host_needs_to_resume(approver, member, tickets):
    run_id = tickets["member", "write"]
    [row] = [
        r for r in client_for(approver).get("/api/tickets/").json()["results"] if r["run"] == run_id
    ]
    ticket = active_ticket(run_id)
    assert row["correlation_id"] == str(ticket.correlation_id)
    assert row["snapshot_id"] == ticket.snapshot_id
    assert row["catalog_fingerprint"] == ticket.catalog_fingerprint
    assert row["target"]["call_id"] == ticket.call_id
    assert row["target"]["arguments_digest"] == ticket.arguments_digest
    assert row["initiator"] == member.username
    body = {k: row[k] for k in ("correlation_id", "run", "snapshot_id", "catalog_fingerprint")}
    body |= {
        "call_id": row["target"]["call_id"],
        "result": {"kind": "permission", "decision": "allow"},
    }
    assert resume(client_for(approver), run_id, body).status_code == 200


def test_answered_void_and_expired_tickets_are_not_listed(approver, member, tickets):
    client = client_for(approver)
    # answered
    write = tickets["member", "write"]
    assert resume(client, write, allow(active_ticket(write))).status_code == 200
    ask = tickets["member", "ask"]
    assert resume(client_for(member), ask, answer(active_ticket(ask), {"n": 1})).status_code == 200
    # void
    cancelled = tickets["other", "write"]
    assert client.post(f"/api/runs/{cancelled}/cancel/").status_code == 200
    # expired
    late = tickets["other", "ask"]
    Ticket.objects.filter(run_id=late).update(deadline=timezone.now() - timedelta(seconds=1))
    assert ticket_expire_due() == 1

    statuses = dict(Ticket.objects.values_list("run_id", "status"))
    assert statuses == {write: "answered", ask: "answered", cancelled: "void", late: "expired"}
    assert listed(approver) == set()
    assert listed(member) == set()


def test_anonymous_callers_get_no_tickets(client, tickets):
    response = client.get("/api/tickets/")
    assert response.status_code in (401, 403)
