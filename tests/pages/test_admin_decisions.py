"""The admin acts too (UI-5, HITL-3, HITL-8, HITL-11): the ticket's change page decides
through `run_resume` and the run's change page cancels through `run_cancel`, with refusals
shown as admin messages in the words of `agentruns/words.py`."""

from __future__ import annotations

from html import unescape

import pytest
from django.test import Client

from agentruns.models import Run, Ticket
from agentruns.words import WORDS
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.hitl import active_ticket, identity, picture, results_by_call, write_call
from tests.support.runs import park

pytestmark = pytest.mark.django_db

TURNS = [{"tool_calls": [write_call("Admin", "b", call_id="call_w")]}, {"text": "done"}]
SCHEMA = {
    "type": "object",
    "properties": {"hours": {"type": "integer", "minimum": 0, "maximum": 72}},
    "required": ["hours"],
}
ASK = {"id": "call_q", "name": "ask_user", "arguments": {"question": "How long?", "schema": SCHEMA}}


@pytest.fixture
def operator(staff):
    return grant(staff, "approve_run", "view_ticket", "change_ticket", "view_run", "change_run")


@pytest.fixture
def admin_client(operator) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def decide_url(ticket: Ticket) -> str:
    return f"/admin/agentruns/ticket/{ticket.pk}/decide/"


def page(response) -> str:
    return unescape(response.content.decode())


def test_ui5_the_ticket_page_offers_approve_deny_and_a_note_and_links_the_run(admin_client, member):
    scripted_configuration("adm", TURNS)
    run = park(member, "adm")
    ticket = active_ticket(run.pk)
    html = page(admin_client.get(f"/admin/agentruns/ticket/{ticket.pk}/change/"))
    assert ">Approve</button>" in html and ">Deny</button>" in html
    assert '<label for="admin-note">Note</label>' in html
    assert f'href="/runs/{run.pk}/"' in html
    assert f'value="{ticket.snapshot_id}"' in html  # identity posted as shown


def test_ui5_an_approval_from_the_admin_goes_through_run_resume(admin_client, operator, member):
    scripted_configuration("adm", TURNS)
    run = park(member, "adm")
    ticket = active_ticket(run.pk)
    data = {**identity(ticket), "kind": "permission", "decision": "allow", "note": "ok"}
    response = admin_client.post(decide_url(ticket), data, follow=True)
    assert "Approved: notes.write on run #" in page(response)
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ANSWERED and ticket.resolved_by == operator
    assert Run.objects.get(pk=run.pk).status == Run.Status.QUEUED


def test_hitl5_a_deny_from_the_admin_reaches_the_model_with_its_note(admin_client, member):
    scripted_configuration("adm", TURNS)
    run = park(member, "adm")
    ticket = active_ticket(run.pk)
    data = {**identity(ticket), "kind": "permission", "decision": "deny", "note": "too risky"}
    admin_client.post(decide_url(ticket), data)
    result = results_by_call(run.pk)["call_w"]
    assert result["status"] == "denied" and "too risky" in result["content"]


def test_hitl8_four_eyes_holds_in_the_admin_and_is_shown_in_words(admin_client, operator):
    scripted_configuration("adm4", TURNS, require_second_approver=True)
    run = park(operator, "adm4")
    ticket = active_ticket(run.pk)
    before = picture(run.pk)
    data = {**identity(ticket), "kind": "permission", "decision": "allow"}
    response = admin_client.post(decide_url(ticket), data, follow=True)
    assert WORDS["self_approval"] in page(response)
    assert picture(run.pk) == before


def test_hitl3_a_stale_admin_post_changes_nothing_and_says_why(admin_client, member):
    scripted_configuration("adm", TURNS)
    run = park(member, "adm")
    ticket = active_ticket(run.pk)
    data = {**identity(ticket), "kind": "permission", "decision": "allow"}
    admin_client.post(decide_url(ticket), data)
    before = picture(run.pk)
    response = admin_client.post(decide_url(ticket), data, follow=True)
    assert WORDS["not_awaiting"] in page(response)
    assert picture(run.pk) == before


def test_hitl6_a_typed_answer_from_the_admin_is_checked_by_the_schema(admin_client, member):
    scripted_configuration("admq", [{"tool_calls": [ASK]}, {"text": "thanks"}])
    run = park(member, "admq")
    ticket = active_ticket(run.pk)
    html = page(admin_client.get(f"/admin/agentruns/ticket/{ticket.pk}/change/"))
    assert f'<label for="q-{ticket.correlation_id}-value__hours">Hours' in html
    assert ">Answer</button>" in html
    data = {**identity(ticket), "kind": "input", "value.hours": "100"}
    refused = page(admin_client.post(decide_url(ticket), data, follow=True))
    assert WORDS["invalid_input"] in refused
    assert "Hours: At most 72." in refused  # the admin capitalises
    assert active_ticket(run.pk).pk == ticket.pk
    data["value.hours"] = "5"
    accepted = page(admin_client.post(decide_url(ticket), data, follow=True))
    assert "Answer sent: run #" in accepted
    assert results_by_call(run.pk)["call_q"]["content"] == '{"hours": 5}'


def test_hitl11_the_run_page_in_the_admin_cancels_through_run_cancel(admin_client, member):
    scripted_configuration("adm", TURNS)
    run = park(member, "adm")
    ticket = active_ticket(run.pk)
    html = page(admin_client.get(f"/admin/agentruns/run/{run.pk}/change/"))
    assert ">Cancel run</button>" in html and f'href="/runs/{run.pk}/"' in html
    response = admin_client.post(f"/admin/agentruns/run/{run.pk}/cancel/", follow=True)
    assert f"Run {run.pk} cancelled: it ended." in page(response)
    assert Run.objects.get(pk=run.pk).status == Run.Status.CANCELLED
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.VOID
    again = page(admin_client.post(f"/admin/agentruns/run/{run.pk}/cancel/", follow=True))
    assert "The run already ended (cancelled)." in again
    assert ">Cancel run</button>" not in again


def test_admin_decide_and_cancel_refuse_get(admin_client, member):
    scripted_configuration("adm", TURNS)
    run = park(member, "adm")
    ticket = active_ticket(run.pk)
    assert admin_client.get(decide_url(ticket)).status_code == 405
    assert admin_client.get(f"/admin/agentruns/run/{run.pk}/cancel/").status_code == 405
    assert active_ticket(run.pk).pk == ticket.pk
