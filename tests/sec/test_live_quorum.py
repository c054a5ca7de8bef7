"""SEC-17: a quorum counts only live authority. An allow whose giver was deactivated, or
lost the right to decide the ticket (approve_run, routing), is dropped from the count, and
the card and the API say so."""

from __future__ import annotations

from html import unescape

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from agentruns.models import Event, Note, Run
from agentruns.runtime.loop import execute_run
from tests.support.hitl import active_ticket, allow, client_for, resume
from tests.support.routing import WRITE_TURNS, person, routed_configuration
from tests.support.runs import park

pytestmark = pytest.mark.django_db


@pytest.fixture
def finance():
    return Group.objects.create(name="finance")


def parked_for(finance, django_user_model) -> Run:
    routed_configuration("pay", finance, turns=WRITE_TURNS, approvals_required=2)
    return park(django_user_model.objects.create_user("initiator"), "pay")


def allowed(user, run):
    return resume(client_for(user), run.pk, allow(active_ticket(run.pk)))


def test_a_deactivated_accounts_allow_no_longer_counts(finance, django_user_model):
    ada, bob, cy = (person(name, finance) for name in ("ada", "bob", "cy"))
    run = parked_for(finance, django_user_model)
    assert allowed(ada, run).json()["status"] == Run.Status.AWAITING  # 1 of 2
    ada.is_active = False
    ada.save()
    second = allowed(bob, run)
    assert second.status_code == 200, second.json()
    assert second.json()["status"] == Run.Status.AWAITING  # bob's is the only live allow
    approvals = second.json()["ticket"]["approvals"]
    assert approvals["approvers"] == ["bob"] and approvals["dropped"] == ["ada"]
    assert execute_run(run.pk) is None and Note.objects.count() == 0
    browser = Client()
    browser.force_login(cy)
    card = unescape(browser.get(f"/inbox/{active_ticket(run.pk).correlation_id}/").content.decode())
    assert "1 of 2 approvals" in card and "No longer counted: ada" in card
    assert allowed(cy, run).json()["status"] == Run.Status.QUEUED
    decided = Event.objects.get(run=run, type="ticket.decided").payload
    assert decided["approvers"] == ["bob", "cy"]


def test_an_approver_removed_from_the_routing_group_no_longer_counts(finance, django_user_model):
    ada, bob, cy = (person(name, finance) for name in ("ada", "bob", "cy"))
    run = parked_for(finance, django_user_model)
    assert allowed(ada, run).status_code == 200
    ada.groups.remove(finance)
    assert allowed(bob, run).json()["status"] == Run.Status.AWAITING
    assert allowed(cy, run).json()["status"] == Run.Status.QUEUED
    decided = Event.objects.get(run=run, type="ticket.decided").payload
    assert decided["approvers"] == ["bob", "cy"]
