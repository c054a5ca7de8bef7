"""`agentruns/policy.py`: each permission rule once, its predicate and its queryset form
agreeing for every kind of caller (SEC-2 seeing, SEC-10 steering, HITL-9 answering, HITL-11
cancelling, HITL-8 four-eyes, OPS-6 who is told)."""

from __future__ import annotations

import pytest

from agentruns import policy
from agentruns.models import Event, Ticket
from tests.conftest import grant
from tests.support.catalog import make_configuration
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

ROLES = ["plain", "initiator", "view_all_runs", "approve_run", "superuser", "inactive approver"]


@pytest.fixture
def people(django_user_model):
    make = django_user_model.objects.create_user
    return {
        "plain": make("plain", email="plain@example.org"),
        "initiator": make("initiator", email="initiator@example.org"),
        "view_all_runs": grant(make("viewer", email="viewer@example.org"), "view_all_runs"),
        "approve_run": grant(make("approver", email="approver@example.org"), "approve_run"),
        "superuser": django_user_model.objects.create_superuser("root", "root@example.org"),
        "inactive approver": grant(
            make("gone", email="gone@example.org", is_active=False), "approve_run"
        ),
    }


@pytest.fixture
def tickets(people):
    """One ticket of each kind on two runs of the initiator, one under four-eyes."""
    make_configuration("c", require_second_approver=True)
    made = {}
    for kind in Ticket.Kind:
        run = submit(people["initiator"], "c", f"a run waiting on {kind}")
        made[kind] = Ticket.objects.create(
            run=run, thread=run.thread, snapshot_id="s", catalog_fingerprint="f", kind=kind
        )
    return made


@pytest.mark.parametrize("role", ROLES)
def test_seeing_and_steering_the_predicate_and_the_queryset_agree(people, tickets, role):
    user = people[role]
    for ticket in tickets.values():
        run = ticket.run
        listed = policy.visible_runs(user).filter(pk=run.pk).exists()
        assert policy.may_see_run(user, run) is listed
        assert policy.visible_threads(user).filter(pk=run.thread_id).exists() is listed
        assert policy.visible_tickets(user).filter(pk=ticket.pk).exists() is listed
        # What hangs off a thread follows it (the admin's event and delivery lists).
        events = policy.of_visible_threads(Event.objects.filter(run=run), user)
        assert events.exists() is listed
        # SEC-10: steering is the initiator's alone, whoever else sees the thread.
        assert policy.may_steer(user, run.thread) is (role == "initiator")
    sees_all = role in ("view_all_runs", "approve_run", "superuser")
    assert policy.may_see_run(user, tickets[Ticket.Kind.REMOTE_INPUT].run) is (
        sees_all or role == "initiator"
    )


@pytest.mark.parametrize("role", ROLES)
def test_hitl9_answering_the_predicate_and_the_queryset_agree(people, tickets, role):
    user = people[role]
    for ticket in tickets.values():
        listed = policy.answerable_tickets(user).filter(pk=ticket.pk).exists()
        assert policy.may_answer(user, ticket.run, ticket.answer) is listed
    approver = role in ("approve_run", "superuser")
    answers = {kind for kind, t in tickets.items() if policy.may_answer(user, t.run, t.answer)}
    # SCHED-3, DEL-1: a timer is the clock's to answer and a delegation its child's, nobody's.
    nobodys = {Ticket.Kind.TIMER, Ticket.Kind.DELEGATION}
    expected = set(Ticket.Kind) - nobodys if approver else set()
    if role == "initiator":
        expected = {Ticket.Kind.REMOTE_INPUT}  # their own question, never a tool call
    assert answers == expected
    assert policy.may_cancel(user, tickets[Ticket.Kind.TOOL_PERMISSION].run) is (
        approver or role == "initiator"
    )


def test_ops6_who_is_told_is_who_may_answer(people, tickets):
    """The mail goes to the active users who may answer the ticket (HITL-9)."""
    approvers = {u.email for u in policy.approvers()}
    assert approvers == {"approver@example.org", "root@example.org"}
    for ticket in tickets.values():
        told = set(policy.recipients(ticket, approvers))
        may = {
            user.email
            for user in people.values()
            if user.is_active and policy.may_answer(user, ticket.run, ticket.answer)
        }
        assert told == may


def test_hitl8_four_eyes_blocks_only_the_initiator_and_says_why(people, tickets):
    run = tickets[Ticket.Kind.TOOL_PERMISSION].run
    mine = policy.four_eyes(people["initiator"], run)
    assert mine.applies and mine.blocks
    assert "you started this run" in mine.explanation and "you may still deny" in mine.explanation
    theirs = policy.four_eyes(people["approve_run"], run)
    assert theirs.applies and not theirs.blocks
    assert theirs.explanation == "initiator started this run and may not approve it; you can."
    run.configuration.require_second_approver = False
    assert policy.four_eyes(people["initiator"], run) == policy.FourEyes(False, False, "")
