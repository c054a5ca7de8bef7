"""HITL-12: an approver allows a call with edited arguments. They must fit the same tool's
schema (never another tool), are redacted, get their own digest, and are what runs —
exactly once, across a worker crash between the decision and the tool."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.test import Client

from agentruns.models import Event, Note, Run, Ticket, ToolInvocation
from agentruns.runtime.effects import idempotency_key
from agentruns.runtime.loop import execute_run
from agentruns.runtime.state import ProposedCall
from agentruns.tools.registry import REGISTRY, digest
from agentruns.words import WORDS
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.crash import claim_and_die, effect_lines, expire_lease
from tests.support.hitl import (
    active_ticket,
    allow,
    client_for,
    deny,
    identity,
    picture,
    results_by_call,
    resume,
    write_call,
)
from tests.support.runs import park

pytestmark = pytest.mark.django_db

NOTE = write_call("draft", "the model's body", call_id="call_w")
EDITED = {"title": "final", "body": "the approver's body"}


@pytest.fixture
def approver(staff):
    return grant(staff, "approve_run")


@pytest.fixture
def parked(approver):
    scripted_configuration("edits", [{"tool_calls": [NOTE]}, {"text": "done"}])
    return park(approver, "edits")


def edit(ticket, arguments, note="", **result):
    body = allow(ticket, note)
    body["result"].update(arguments=arguments, **result)
    return body


def test_hitl12_an_edited_allow_executes_the_edited_arguments_once(approver, parked):
    ticket = active_ticket(parked.pk)
    response = resume(client_for(approver), parked.pk, edit(ticket, EDITED, "tidied"))
    assert response.status_code == 200, response.json()
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ANSWERED
    assert ticket.arguments == NOTE["arguments"]  # the model's own stay on record
    decided = Event.objects.get(run=parked, type="ticket.decided").payload
    assert decided["original_digest"] == digest(NOTE["arguments"])
    assert decided["arguments_digest"] == digest(EDITED)
    assert decided["edited_by"] == approver.username
    assert decided["by"] == approver.username
    invocation = ToolInvocation.objects.get(run=parked)
    assert invocation.arguments == EDITED
    assert invocation.arguments_digest == digest(EDITED)
    call = ProposedCall("call_w", "notes.write", EDITED)
    assert invocation.idempotency_key == idempotency_key(
        parked.pk, invocation.turn_index, call, REGISTRY.get("notes.write")
    )
    assert execute_run(parked.pk) == Run.Status.COMPLETED
    assert list(Note.objects.values_list("title", "body")) == [("final", "the approver's body")]
    content = results_by_call(parked.pk)["call_w"]["content"]
    assert content.startswith(f"[The approver {approver.username} changed the arguments")
    assert '"title": "final"' in content


def test_hitl12_an_edit_naming_another_tool_is_refused_and_changes_nothing(approver, parked):
    ticket = active_ticket(parked.pk)
    before = picture(parked.pk)
    body = edit(ticket, {"value": "x"}, tool="test.external_write")
    response = resume(client_for(approver), parked.pk, body)
    assert response.status_code == 422
    assert response.json()["code"] == "invalid_arguments"
    assert "tool" in response.json()["fields"]
    assert picture(parked.pk) == before
    assert active_ticket(parked.pk).pk == ticket.pk
    assert Run.objects.get(pk=parked.pk).status == Run.Status.AWAITING


@pytest.mark.parametrize(
    "arguments",
    [
        {"title": "only a title"},  # body is required
        {"title": 7, "body": "b"},  # title is a string
        {"title": "t", "body": "b", "extra": 1},  # notes.write takes no other property
        ["not", "an", "object"],
    ],
)
def test_hitl12_an_edit_breaking_the_schema_is_refused_and_changes_nothing(
    approver, parked, arguments
):
    ticket = active_ticket(parked.pk)
    before = picture(parked.pk)
    response = resume(client_for(approver), parked.pk, edit(ticket, arguments))
    assert response.status_code == 422, response.json()
    assert response.json()["code"] == "invalid_arguments"
    assert response.json()["fields"]
    assert picture(parked.pk) == before
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ACTIVE and not ticket.edited_digest


def test_hitl12_a_deny_carrying_arguments_is_refused(approver, parked):
    ticket = active_ticket(parked.pk)
    body = deny(ticket)
    body["result"]["arguments"] = EDITED
    response = resume(client_for(approver), parked.pk, body)
    assert response.json()["code"] == "invalid_arguments"
    assert active_ticket(parked.pk).pk == ticket.pk


def test_hitl12_edited_arguments_are_redacted_before_they_are_stored_or_run(approver, parked):
    secret = "sk-proj-" + "Z" * 40
    body = edit(active_ticket(parked.pk), {"title": "key", "body": f"use {secret}"})
    assert resume(client_for(approver), parked.pk, body).status_code == 200
    assert execute_run(parked.pk) == Run.Status.COMPLETED
    stored = Note.objects.get(run=parked).body
    assert secret not in stored
    assert secret not in str(ToolInvocation.objects.get(run=parked).arguments)
    kinds = Event.objects.filter(run=parked, type="secret.redacted")
    assert "edited_arguments" in [e.payload["where"] for e in kinds]


def test_hitl12_hitl10_an_edited_call_whose_tool_was_withdrawn_does_not_run(approver, parked):
    resume(client_for(approver), parked.pk, edit(active_ticket(parked.pk), EDITED))
    parked.configuration.allowed_tools = ["test"]
    parked.configuration.save()
    assert execute_run(parked.pk) == Run.Status.COMPLETED
    assert Note.objects.count() == 0
    assert results_by_call(parked.pk)["call_w"]["status"] == "not_permitted"


def test_hitl12_an_edit_identical_to_the_models_arguments_is_a_plain_allow(approver, parked):
    body = edit(active_ticket(parked.pk), dict(NOTE["arguments"]))
    assert resume(client_for(approver), parked.pk, body).status_code == 200
    decided = Event.objects.get(run=parked, type="ticket.decided").payload
    assert "edited_by" not in decided
    assert execute_run(parked.pk) == Run.Status.COMPLETED
    assert not results_by_call(parked.pk)["call_w"]["content"].startswith("[")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_hitl12_a_crash_between_the_edited_decision_and_the_tool_runs_only_the_edit(
    approver, tmp_path, monkeypatch
):
    effects = tmp_path / "effects"
    monkeypatch.setenv("AGENTRUNS_TEST_EFFECT_FILE", str(effects))
    call = {"id": "call_ext", "name": "test.external_write", "arguments": {"value": "model"}}
    scripted_configuration(
        "crash-edit", [{"tool_calls": [call]}, {"text": "done"}], allowed_tools=["test"]
    )
    run = park(approver, "crash-edit")
    body = edit(active_ticket(run.pk), {"value": "approver"})
    assert resume(client_for(approver), run.pk, body).status_code == 200
    child = claim_and_die(run.pk)  # the worker dies after claiming, before the tool
    assert child.killed and "claimed" in child.stdout, str(child)
    assert effect_lines(effects, run.pk) == []
    expire_lease(run.pk)
    assert execute_run(run.pk) == Run.Status.COMPLETED
    assert effect_lines(effects, run.pk) == [f"{run.pk}:call_ext:approver"]
    results = Event.objects.filter(run=run, type="tool.result", payload__call_id="call_ext")
    assert [r.payload["status"] for r in results] == ["ok"]


# The pages: the inbox card and the admin's ticket page, as a browser without JavaScript.


def signed_in(user, **kw) -> Client:
    client = Client(**kw)
    client.force_login(user)
    return client


def edit_form(ticket, **fields):
    return {
        **identity(ticket),
        "kind": "permission",
        "decision": "allow",
        "edit": "1",
        "tool": ticket.tool,
        "next": "/inbox/",
        **fields,
    }


def test_hitl12_the_inbox_card_offers_edit_arguments_filled_with_the_models(approver, parked):
    ticket = active_ticket(parked.pk)
    html = unescape(signed_in(approver).get(f"/inbox/{ticket.correlation_id}/").content.decode())
    assert "Edit arguments" in html
    assert 'name="arguments.title" value="draft"' in html
    # notes.write's body may be 20000 characters: a multi-line box, filled (UI-6)
    assert re.search(
        r'<textarea[^>]*name="arguments\.body"[^>]*>the model\'s body</textarea>', html
    )
    assert 'name="edit" value="1"' in html


def test_hitl12_an_edit_posted_from_the_inbox_card_runs_the_edit(approver, parked):
    ticket = active_ticket(parked.pk)
    client = signed_in(approver, enforce_csrf_checks=True)
    page = client.get(f"/inbox/{ticket.correlation_id}/")
    token = page.cookies["csrftoken"].value
    data = edit_form(
        ticket, **{"arguments.title": "final", "arguments.body": "typed"}, csrfmiddlewaretoken=token
    )
    response = client.post(f"/inbox/{ticket.correlation_id}/resume/", data, follow=True)
    assert response.status_code == 200
    assert "with your edited arguments" in unescape(response.content.decode())
    assert execute_run(parked.pk) == Run.Status.COMPLETED
    assert list(Note.objects.values_list("title", "body")) == [("final", "typed")]


def test_hitl12_a_refused_edit_on_the_card_keeps_what_was_typed_with_errors(approver, parked):
    ticket = active_ticket(parked.pk)
    before = picture(parked.pk)
    data = edit_form(ticket, **{"arguments.title": "x" * 201, "arguments.body": "kept body"})
    response = signed_in(approver).post(f"/inbox/{ticket.correlation_id}/resume/", data)
    assert response.status_code == 422
    html = unescape(response.content.decode())
    assert WORDS["invalid_arguments"] in html
    assert "kept body" in html and "x" * 201 in html
    assert 'aria-invalid="true"' in html
    assert '<details class="edit-arguments" open>' in html
    assert picture(parked.pk) == before


def test_hitl12_a_card_post_naming_another_tool_is_refused(approver, parked):
    ticket = active_ticket(parked.pk)
    before = picture(parked.pk)
    data = edit_form(ticket, tool="test.external_write", **{"arguments.title": "t"})
    response = signed_in(approver).post(f"/inbox/{ticket.correlation_id}/resume/", data)
    assert response.status_code == 422
    assert picture(parked.pk) == before


def test_hitl12_the_admin_ticket_page_edits_arguments_through_run_resume(staff, parked):
    operator = grant(staff, "approve_run", "view_ticket", "change_ticket")
    ticket = active_ticket(parked.pk)
    client = signed_in(operator)
    change = f"/admin/agentruns/ticket/{ticket.pk}/change/"
    assert "Edit arguments" in unescape(client.get(change).content.decode())
    decide = f"/admin/agentruns/ticket/{ticket.pk}/decide/"
    bad = edit_form(ticket, **{"arguments.title": "", "arguments.body": "still here"})
    html = unescape(client.post(decide, bad, follow=True).content.decode())
    assert WORDS["invalid_arguments"] in html
    assert "still here" in html  # what was typed is kept after the redirect
    assert active_ticket(parked.pk).pk == ticket.pk
    good = edit_form(ticket, **{"arguments.title": "admin", "arguments.body": "edited"})
    html = unescape(client.post(decide, good, follow=True).content.decode())
    assert "with your edited arguments" in html
    assert execute_run(parked.pk) == Run.Status.COMPLETED
    assert list(Note.objects.values_list("title", "body")) == [("admin", "edited")]
