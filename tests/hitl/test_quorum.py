"""HITL-13: a configuration's `approvals_required` distinct people must allow a call. Each
allow is recorded as it arrives and the ticket stays active until the quorum; the same
person never counts twice; one deny ends it; under four-eyes the initiator never counts;
an edited allow (HITL-12) restarts the count; of concurrent allows exactly the one that
completes the quorum releases the call."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from html import unescape

import pytest
from django.db import connection
from django.test import Client

from agentruns.models import Event, Note, Run, Ticket, TicketApproval
from agentruns.runtime.loop import execute_run
from agentruns.tools.registry import digest
from agentruns.words import WORDS
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
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

TURNS = [{"tool_calls": [write_call("quorum", call_id="call_w")]}, {"text": "done"}]


@pytest.fixture
def people(django_user_model):
    return [
        grant(django_user_model.objects.create_user(name), "approve_run")
        for name in ("ada", "bob", "cy", "dee")
    ]


def parked(user, required=2, **kw):
    scripted_configuration("quorum", TURNS, approvals_required=required, **kw)
    return park(user, "quorum")


def allowed_by(user, run, **result):
    body = allow(active_ticket(run.pk))
    body["result"].update(result)
    return resume(client_for(user), run.pk, body)


def test_hitl13_a_quorum_of_two_waits_for_the_second_person(people):
    ada, bob = people[:2]
    run = parked(ada)
    first = allowed_by(ada, run)
    assert first.status_code == 200, first.json()
    assert first.json()["status"] == Run.Status.AWAITING
    approvals = first.json()["ticket"]["approvals"]
    assert approvals["required"] == 2 and approvals["approvers"] == ["ada"]
    assert Event.objects.filter(run=run, type="ticket.approved").count() == 1
    assert execute_run(run.pk) is None  # still awaiting: nothing to claim
    second = allowed_by(bob, run)
    assert second.status_code == 200, second.json()
    decided = Event.objects.get(run=run, type="ticket.decided").payload
    assert decided["approvers"] == ["ada", "bob"] and decided["by"] == "bob"
    assert execute_run(run.pk) == Run.Status.COMPLETED
    assert Note.objects.count() == 1


def test_hitl13_the_same_persons_second_allow_is_refused_and_changes_nothing(people):
    ada = people[0]
    run = parked(ada)
    assert allowed_by(ada, run).status_code == 200
    before = picture(run.pk)
    again = allowed_by(ada, run)
    assert again.status_code == 409
    assert again.json()["code"] == "already_approved"
    assert picture(run.pk) == before
    assert TicketApproval.objects.count() == 1


def test_hitl13_a_deny_after_one_allow_ends_it(people):
    ada, bob = people[:2]
    run = parked(ada)
    assert allowed_by(ada, run).status_code == 200
    response = resume(client_for(bob), run.pk, deny(active_ticket(run.pk), "no"))
    assert response.status_code == 200, response.json()
    assert not Ticket.objects.filter(run=run, status=Ticket.Status.ACTIVE).exists()
    assert execute_run(run.pk) == Run.Status.COMPLETED
    assert Note.objects.count() == 0
    assert results_by_call(run.pk)["call_w"]["status"] == "denied"


def test_hitl13_hitl8_under_four_eyes_the_initiator_never_counts(people):
    ada, bob, cy = people[:3]
    run = parked(ada, require_second_approver=True)
    refused = allowed_by(ada, run)
    assert refused.status_code == 403 and refused.json()["code"] == "self_approval"
    assert TicketApproval.objects.count() == 0
    assert allowed_by(bob, run).json()["status"] == Run.Status.AWAITING
    assert allowed_by(cy, run).json()["status"] == Run.Status.QUEUED
    decided = Event.objects.get(run=run, type="ticket.decided").payload
    assert decided["approvers"] == ["bob", "cy"]


def test_hitl13_an_allow_from_before_four_eyes_was_switched_on_does_not_count(people):
    ada, bob, cy = people[:3]
    run = parked(ada)
    assert allowed_by(ada, run).status_code == 200  # allowed: no four-eyes yet
    run.configuration.require_second_approver = True
    run.configuration.save()
    assert allowed_by(bob, run).json()["status"] == Run.Status.AWAITING  # 1 of 2, not 2
    assert allowed_by(cy, run).json()["status"] == Run.Status.QUEUED


def test_hitl13_hitl12_an_edited_allow_restarts_the_count_for_the_new_arguments(people):
    ada, bob, cy = people[:3]
    run = parked(ada)
    ticket = active_ticket(run.pk)
    assert allowed_by(ada, run).status_code == 200
    edited = {"title": "edited", "body": "by bob"}
    response = allowed_by(bob, run, arguments=edited)
    assert response.status_code == 200, response.json()
    approvals = response.json()["ticket"]["approvals"]
    assert approvals["approvers"] == ["bob"]  # ada allowed the model's arguments only
    assert approvals["arguments_digest"] == digest(edited)
    assert approvals["edited_by"] == "bob"
    # ada may allow again: she never allowed these arguments, and completes the quorum
    # (SEC-16: naming the edit she was shown).
    again = allowed_by(ada, run, arguments_digest=digest(edited))
    assert again.json()["status"] == Run.Status.QUEUED
    decided = Event.objects.get(run=run, type="ticket.decided").payload
    assert decided["approvers"] == ["bob", "ada"] and decided["edited_by"] == "bob"
    assert execute_run(run.pk) == Run.Status.COMPLETED
    assert list(Note.objects.values_list("title", flat=True)) == ["edited"]
    late = resume(client_for(cy), run.pk, allow(ticket))
    assert late.json()["code"] == "not_awaiting"


THREADS = 8


@pytest.mark.django_db(transaction=True)
def test_hitl13_concurrent_allows_release_the_call_exactly_once(django_user_model):
    users = [
        grant(django_user_model.objects.create_user(f"approver{i}"), "approve_run")
        for i in range(THREADS)
    ]
    run = parked(users[0], required=3)
    body = allow(active_ticket(run.pk))
    barrier = threading.Barrier(THREADS)

    def one(i):
        try:
            barrier.wait(timeout=30)
            response = resume(client_for(users[i]), run.pk, body)
            data = response.json()
            return response.status_code, data.get("status") or data.get("code")
        finally:
            connection.close()

    with ThreadPoolExecutor(THREADS) as pool:
        outcomes = Counter(pool.map(one, range(THREADS)))
    assert outcomes == {
        (200, Run.Status.AWAITING): 2,  # the first two allows are counted
        (200, Run.Status.QUEUED): 1,  # the third completes the quorum
        (409, "not_awaiting"): THREADS - 3,
    }, outcomes
    assert Event.objects.filter(run=run, type="ticket.decided").count() == 1
    assert Event.objects.filter(run=run, type="ticket.approved").count() == 2
    assert execute_run(run.pk) == Run.Status.COMPLETED
    assert Note.objects.filter(run=run).count() == 1


def test_hitl13_approvals_required_is_between_one_and_five_in_the_api(staff, people):
    client = client_for(grant(staff, "add_configuration", "change_configuration"))
    config = scripted_configuration("bounds", TURNS)
    assert config.approvals_required == 1
    url = f"/api/configurations/{config.slug}/"
    for bad in (0, 6):
        response = client.patch(url, {"approvals_required": bad}, format="json")
        assert response.status_code == 400, response.json()
    response = client.patch(url, {"approvals_required": 5}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["approvals_required"] == 5


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def card_allow(ticket, **fields):
    """The card's Approve form as a browser without JavaScript posts it."""
    return {
        **identity(ticket),
        "kind": "permission",
        "decision": "allow",
        "next": "/inbox/",
        **fields,
    }


def test_hitl13_the_inbox_card_shows_the_count_and_who_no_js_post(people):
    ada, bob = people[:2]
    run = parked(ada)
    ticket = active_ticket(run.pk)
    client = signed_in(ada)
    data = card_allow(ticket)
    response = client.post(f"/inbox/{ticket.correlation_id}/resume/", data, follow=True)
    html = unescape(response.content.decode())
    assert "Approval counted" in html
    assert "1 of 2 approvals" in html and ": ada" in html
    assert "you approved these arguments" in html
    again = unescape(
        client.post(f"/inbox/{ticket.correlation_id}/resume/", data, follow=True).content.decode()
    )
    assert WORDS["already_approved"] in again
    other = signed_in(bob)
    card = unescape(other.get(f"/inbox/{ticket.correlation_id}/").content.decode())
    assert "1 of 2 approvals" in card and "you approved" not in card
    other.post(f"/inbox/{ticket.correlation_id}/resume/", data)
    assert Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.ANSWERED


def test_hitl13_hitl12_an_allow_of_arguments_edited_since_they_were_shown_is_refused(people):
    ada, bob, cy = people[:3]
    run = parked(ada, required=3)
    shown = active_ticket(run.pk).arguments_digest  # what cy's card showed
    edited = {"title": "edited", "body": "meanwhile"}
    assert allowed_by(bob, run, arguments=edited).status_code == 200
    before = picture(run.pk)
    stale = allowed_by(cy, run, arguments_digest=shown)
    assert stale.status_code == 409
    assert stale.json()["code"] == "arguments_changed"
    assert picture(run.pk) == before
    fresh = allowed_by(cy, run, arguments_digest=digest(edited))
    assert fresh.json()["ticket"]["approvals"]["approvers"] == ["bob", "cy"]


def test_hitl13_the_card_posts_the_digest_of_the_arguments_it_shows(people):
    ada, bob = people[:2]
    run = parked(ada)
    ticket = active_ticket(run.pk)
    client = signed_in(bob)
    html = client.get(f"/inbox/{ticket.correlation_id}/").content.decode()
    assert f'name="arguments_digest" value="{ticket.arguments_digest}"' in html
    edited = {"title": "edited", "body": "meanwhile"}
    assert allowed_by(ada, run, arguments=edited).status_code == 200
    data = card_allow(ticket, arguments_digest=ticket.arguments_digest)
    response = client.post(f"/inbox/{ticket.correlation_id}/resume/", data, follow=True)
    assert WORDS["arguments_changed"] in unescape(response.content.decode())
    assert TicketApproval.objects.filter(user=bob).count() == 0
