"""Issue 48, item 8: behaviours the third review asked to settle, each with its test.
HITL-11 with HITL-14 (who may cancel a routed run), SEC-2 with HITL-14 (who sees a routed
ticket)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from agentruns.models import Run, Ticket
from tests.conftest import grant
from tests.support.hitl import active_ticket, client_for
from tests.support.routing import person, routed_configuration
from tests.support.runs import park

pytestmark = pytest.mark.django_db


@pytest.fixture
def routed(django_user_model):
    finance = Group.objects.create(name="finance")
    routed_configuration("pay", finance)
    run = park(django_user_model.objects.create_user("initiator"), "pay")
    return finance, run


def test_an_approver_outside_the_routing_group_may_not_cancel_a_routed_waiting_run(routed):
    """Settled: cancelling a waiting run voids its ticket, a decision by another name, so
    it takes the right to decide that ticket (HITL-14); a member of the group may."""
    finance, run = routed
    outsider = person("outsider")
    refused = client_for(outsider).post(f"/api/runs/{run.pk}/cancel/")
    assert refused.status_code == 403, refused.content
    ticket = active_ticket(run.pk)
    assert ticket.status == Ticket.Status.ACTIVE
    member = person("member", finance)
    cancelled = client_for(member).post(f"/api/runs/{run.pk}/cancel/")
    assert cancelled.status_code == 200, cancelled.content
    assert Run.objects.get(pk=run.pk).status == Run.Status.CANCELLED
    assert Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.VOID


def test_a_holder_of_view_all_runs_sees_a_routed_ticket_and_cannot_decide_it(
    routed, django_user_model
):
    """Settled (SEC-2, HITL-14): `view_all_runs` is an auditor's right, which sees every
    ticket, routed ones included, in the run API; seeing is not deciding."""
    _, run = routed
    auditor = grant(django_user_model.objects.create_user("auditor"), "view_all_runs")
    shown = client_for(auditor).get(f"/api/runs/{run.pk}/").json()
    assert shown["ticket"]["correlation_id"] == str(active_ticket(run.pk).correlation_id)
    assert client_for(auditor).post(f"/api/runs/{run.pk}/cancel/").status_code == 403
