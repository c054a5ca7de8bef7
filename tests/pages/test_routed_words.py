"""HITL-14: a routed ticket explains itself truly. An approver outside the approver groups
who started the run sees its card (it is their run) and reads that routing, not a missing
permission, keeps them from deciding; someone without `approve_run` reads the groups too."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from tests.support.hitl import active_ticket
from tests.support.routing import person, routed_configuration
from tests.support.runs import park

pytestmark = pytest.mark.django_db


def card(user, ticket) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(f"/inbox/{ticket.correlation_id}/")
    assert response.status_code == 200
    return response.content.decode()


def test_hitl14_an_approver_outside_the_groups_reads_that_routing_keeps_them_out(
    django_user_model,
):
    payments = Group.objects.create(name="payments")
    routed_configuration("routed", payments)
    boss = django_user_model.objects.create_superuser("boss", password="pw")
    ticket = active_ticket(park(boss, "routed").pk)
    page = card(boss, ticket)
    assert "It is routed to the approvers (approve_run) of payments." in page
    assert "You are an approver but not one of them" in page
    assert "It waits for someone who may decide it: an approver" not in page


def test_hitl14_a_plain_initiator_reads_whom_a_routed_ticket_waits_for(member):
    payments = Group.objects.create(name="payments")
    routed_configuration("routed", payments)
    person("ines", payments)
    page = card(member, active_ticket(park(member, "routed").pk))
    assert "It is routed to the approvers (approve_run) of payments." in page
    assert "You are an approver" not in page
