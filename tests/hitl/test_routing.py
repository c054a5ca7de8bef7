"""HITL-14: a configuration's `approver_groups` route its tickets. Only members of those
groups holding `approve_run` see and decide them, in the inbox, the admin and the API,
and only they are mailed (OPS-6); one rule (`agentruns.policy`) behind all four. An
approver outside the groups gets a 404 for the ticket; one who started the run still
sees it, and deciding gives `not_permitted`. A configuration without groups is decided
by every approver, as before."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.test import Client
from django.utils import timezone

from agentruns.models import Configuration, Run, ToolInvocation
from agentruns.policy import answerable_tickets, deciders, may_decide, visible_tickets
from agentruns.services.notifications import tickets_notify_due
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
)
from tests.support.routing import ASK_TURNS, WRITE_TURNS, person, routed_configuration
from tests.support.runs import park

pytestmark = pytest.mark.django_db


@pytest.fixture
def payments():
    return Group.objects.create(name="payments")


@pytest.fixture
def insider(payments):
    return person("ines", payments)


@pytest.fixture
def outsider():
    return person("otto")


@pytest.fixture
def routed(payments, member):
    routed_configuration("routed", payments)
    return park(member, "routed")


def page(user):
    client = Client()
    client.force_login(user)
    return client


def test_hitl14_only_the_groups_approvers_see_a_routed_ticket_in_the_inbox(
    routed, insider, outsider
):
    ticket = active_ticket(routed.pk)
    cid = str(ticket.correlation_id)
    inside = page(insider).get("/inbox/").content.decode()
    assert cid in inside and "approver groups" in inside  # the card says why
    assert cid not in page(outsider).get("/inbox/").content.decode()
    assert page(outsider).get(f"/inbox/{cid}/").status_code == 404
    assert page(outsider).get(f"/inbox/{cid}/live/").status_code == 404


def test_hitl14_an_outsiders_post_from_the_inbox_is_a_404_and_changes_nothing(routed, outsider):
    ticket = active_ticket(routed.pk)
    before = picture(routed.pk)
    body = {**identity(ticket), "kind": "permission", "decision": "allow", "note": ""}
    response = page(outsider).post(f"/inbox/{ticket.correlation_id}/resume/", body)
    assert response.status_code == 404
    assert picture(routed.pk) == before


def test_hitl14_the_api_lists_and_resumes_a_routed_ticket_only_for_the_group(
    routed, insider, outsider
):
    ticket = active_ticket(routed.pk)
    listed = client_for(outsider).get("/api/tickets/").json()["results"]
    assert str(ticket.correlation_id) not in {row["correlation_id"] for row in listed}
    before = picture(routed.pk)
    refused = resume(client_for(outsider), routed.pk, allow(ticket))
    assert refused.status_code == 404 and refused.json()["code"] == "not_found"
    assert picture(routed.pk) == before
    listed = client_for(insider).get("/api/tickets/").json()["results"]
    assert str(ticket.correlation_id) in {row["correlation_id"] for row in listed}
    assert resume(client_for(insider), routed.pk, allow(ticket)).status_code == 200
    assert Run.objects.get(pk=routed.pk).status == Run.Status.QUEUED


def test_hitl14_an_initiator_outside_the_groups_sees_their_run_but_may_not_decide(payments):
    starter = person("stan")  # an approver, not in the group, who started the run
    routed_configuration("routed", payments)
    run = park(starter, "routed")
    ticket = active_ticket(run.pk)
    assert visible_tickets(starter).filter(pk=ticket.pk).exists()
    assert not may_decide(starter, ticket)
    assert not answerable_tickets(starter).exists()  # the inbox asks nothing of them
    before = picture(run.pk)
    for body in (allow(ticket), deny(ticket)):
        refused = resume(client_for(starter), run.pk, body)
        assert refused.status_code == 403 and refused.json()["code"] == "not_permitted"
    assert picture(run.pk) == before


def test_hitl14_hitl9_an_initiator_still_answers_their_own_question_on_a_routed_configuration(
    payments, member
):
    routed_configuration("asks", payments, turns=ASK_TURNS)
    run = park(member, "asks")
    ticket = active_ticket(run.pk)
    assert resume(client_for(member), run.pk, answer(ticket, {"n": 3})).status_code == 200


def test_hitl14_group_membership_without_approve_run_decides_nothing(routed, payments):
    clerk = person("clerk", payments, approves=False)
    ticket = active_ticket(routed.pk)
    assert not visible_tickets(clerk).filter(pk=ticket.pk).exists()
    assert resume(client_for(clerk), routed.pk, allow(ticket)).status_code == 404


def test_hitl14_the_admin_lists_and_decides_a_routed_ticket_only_for_the_group(
    routed, insider, outsider
):
    for user in (insider, outsider):
        grant(user, "view_ticket", "change_ticket", "view_run")
    ticket = active_ticket(routed.pk)
    change = f"/admin/agentruns/ticket/{ticket.pk}/change/"
    listing = page(outsider).get("/admin/agentruns/ticket/").content.decode()
    assert change not in listing
    shown = page(outsider).get(change)
    assert shown.status_code == 302  # the admin's "does not exist", never the ticket
    before = picture(routed.pk)
    decide = f"/admin/agentruns/ticket/{ticket.pk}/decide/"
    body = {**identity(ticket), "kind": "permission", "decision": "allow", "note": ""}
    assert page(outsider).post(decide, body).status_code == 404
    assert picture(routed.pk) == before
    assert change in page(insider).get("/admin/agentruns/ticket/").content.decode()
    page(insider).post(decide, body)
    assert Run.objects.get(pk=routed.pk).status == Run.Status.QUEUED


def test_hitl14_ops6_only_the_groups_approvers_are_mailed(routed, insider, outsider, payments):
    person("nora", payments, approves=False)  # in the group, not an approver
    assert tickets_notify_due() == 1
    assert [m.to for m in mail.outbox] == [["ines@example.com"]]
    ticket = active_ticket(routed.pk)
    assert list(deciders(ticket)) == [insider]


def test_hitl14_without_groups_every_approver_sees_decides_and_is_mailed(member, outsider):
    other = person("olga")
    scripted_configuration("open", WRITE_TURNS)
    run = park(member, "open")
    ticket = active_ticket(run.pk)
    for approver in (outsider, other):
        assert answerable_tickets(approver).filter(pk=ticket.pk).exists()
    assert "You are an approver" in page(other).get("/inbox/").content.decode()
    tickets_notify_due()
    assert sorted(m.to[0] for m in mail.outbox) == ["olga@example.com", "otto@example.com"]


def test_hitl14_the_configuration_api_and_admin_edit_the_routing_fields(payments, staff):
    oncall = Group.objects.create(name="on-call")
    scripted_configuration("edit-me", WRITE_TURNS)
    staff.is_superuser = True
    staff.save()
    api = client_for(staff)
    changed = api.patch(
        "/api/configurations/edit-me/",
        {
            "approver_groups": ["payments"],
            "remind_after_seconds": 600,
            "escalation_group": "on-call",
        },
        format="json",
    )
    assert changed.status_code == 200, changed.content
    assert changed.json()["approver_groups"] == ["payments"]
    configuration = Configuration.objects.get(slug="edit-me")
    assert list(configuration.approver_groups.all()) == [payments]
    assert configuration.remind_after_seconds == 600 and configuration.escalation_group == oncall
    assert (
        api.patch(
            "/api/configurations/edit-me/", {"approver_groups": ["nobody"]}, format="json"
        ).status_code
        == 400
    )
    form = page(staff).get(f"/admin/agentruns/configuration/{configuration.pk}/change/")
    html = form.content.decode()
    assert 'type="checkbox" name="approver_groups"' in html
    assert 'name="remind_after_seconds"' in html and 'name="escalation_group"' in html


def test_hitl14_sec2_the_run_detail_shows_the_ticket_only_to_whom_it_is_routed(
    routed, insider, outsider, member
):
    ticket = active_ticket(routed.pk)
    seen = client_for(outsider).get(f"/api/runs/{routed.pk}/").json()
    assert seen["status"] == "awaiting" and seen["ticket"] is None  # the run, not the ticket
    for user in (insider, member):
        shown = client_for(user).get(f"/api/runs/{routed.pk}/").json()["ticket"]
        assert shown["correlation_id"] == str(ticket.correlation_id)


def test_hitl14_tool4_an_uncertain_call_is_shown_as_its_tickets_are_routed(
    routed, insider, outsider, member
):
    """Settles issue 48's check "uncertain calls ignore routing": they no longer do. An
    uncertain write of a routed configuration is shown to its groups' approvers, not to an
    approver outside the groups; `view_all_runs` sees it, as
    it sees every ticket; an unrouted configuration's is every approver's."""
    unrouted = park(member, scripted_configuration("unrouted", WRITE_TURNS).slug)
    ToolInvocation.objects.filter(run_id__in=[routed.pk, unrouted.pk]).update(
        status="uncertain", effect_sent_at=timezone.now()
    )
    auditor = grant(person("audrey"), "view_all_runs")

    def shown(user):
        """The runs whose uncertain call the API lists, checked against the inbox's."""
        runs = {row["run"] for row in client_for(user).get("/api/tickets/").json()["uncertain"]}
        inbox = page(user).get("/inbox/").content.decode()
        for run in (routed, unrouted):
            assert (f"#{run.pk}</a> · {run.configuration.slug}" in inbox) == (run.pk in runs)
        return runs

    assert shown(insider) == shown(auditor) == {routed.pk, unrouted.pk}
    assert shown(outsider) == {unrouted.pk}
