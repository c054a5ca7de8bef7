"""SCHED-3: `agent.wait` parks the run on a `timer` ticket whose due time is in the
database; nothing is held while it waits; the sweeper answers it at the due time; a cancel
voids it; a host cannot answer it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from agentruns.cluster.sweeper import sweep
from agentruns.models import Event, Run, Ticket
from agentruns.policy import answerable_tickets
from agentruns.runtime.loop import execute_run
from agentruns.services.resume import ticket_expire_due
from agentruns.services.runs import run_cancel
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.hitl import allow, answer, client_for, results_by_call, resume
from tests.support.runs import park, prompt

pytestmark = pytest.mark.django_db


def waits(slug: str, **arguments) -> None:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "call_wait", "name": "agent.wait", "arguments": arguments}]},
        {"text": "done waiting"},
    ]
    scripted_configuration(slug, turns, allowed_tools=["agent"])


def come_due(run: Run) -> None:
    """The due time passes (as the clock would move on)."""
    Ticket.objects.filter(run=run).update(deadline=timezone.now() - timedelta(seconds=1))


def test_sched3_a_waiting_run_holds_nothing_and_goes_on_by_itself_at_the_due_time(member):
    waits("nap", seconds=3600)
    run = park(member, "nap")
    ticket = Ticket.objects.get(run=run)
    assert ticket.kind == Ticket.Kind.TIMER and ticket.status == Ticket.Status.ACTIVE
    assert timezone.now() + timedelta(seconds=3590) < ticket.deadline
    assert run.status == Run.Status.AWAITING
    assert run.lease_owner == "" and run.lease_expires_at is None  # no worker, no lease
    assert execute_run(run.pk) is None  # nothing to claim while it waits
    browser = Client()
    browser.force_login(member)
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    assert "Waiting (<code>agent.wait</code>) until" in page and "Waiting for a person" not in page
    assert sweep().timers_fired == 0  # not yet due
    come_due(run)
    assert ticket_expire_due() == 0  # a timer never expires as a denial (HITL-7 is people's)
    assert sweep().timers_fired == 1
    assert execute_run(run.pk) == Run.Status.COMPLETED
    result = results_by_call(run.pk)["call_wait"]
    assert result["status"] == "ok" and result["content"].startswith("Waited")
    assert sweep().timers_fired == 0  # answered once


def test_sched3_until_takes_an_iso_time_and_a_past_one_is_a_model_visible_error(member):
    ahead = (timezone.now() + timedelta(hours=2)).isoformat()
    waits("until", until=ahead)
    run = park(member, "until")
    deadline = Ticket.objects.get(run=run).deadline
    assert abs((deadline - timezone.now()).total_seconds() - 7200) < 60
    waits("past", until="2001-01-01T00:00:00+00:00")
    done = prompt(member, "past")  # nothing to wait for: the model hears why and goes on
    result = results_by_call(done.pk)["call_wait"]
    assert result["status"] == "error" and "not in the future" in result["content"]


def test_sched3_cancel_voids_the_timer_and_the_sweeper_starts_nothing(member):
    waits("cancelled-nap", seconds=60)
    run = park(member, "cancelled-nap")
    assert run_cancel(user=member, run_id=run.pk).status == Run.Status.CANCELLED
    assert Ticket.objects.get(run=run).status == Ticket.Status.VOID
    come_due(run)
    assert sweep().timers_fired == 0
    assert Run.objects.get(pk=run.pk).status == Run.Status.CANCELLED


def test_sched3_a_hosts_answer_to_a_timer_is_result_kind_mismatch_and_nobody_is_asked(member):
    waits("host", seconds=600)
    approver = grant(member, "approve_run")
    run = park(approver, "host")
    ticket = Ticket.objects.get(run=run)
    assert list(answerable_tickets(approver)) == []  # not in anybody's inbox
    for body in (allow(ticket), answer(ticket, {"ok": True})):
        response = resume(client_for(approver), run.pk, body)
        assert response.status_code == 422
        assert response.json()["code"] == "result_kind_mismatch"
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ACTIVE
    shown = client_for(approver).get(f"/api/runs/{run.pk}/").json()["ticket"]["target"]
    assert shown["kind"] == "timer" and shown["due"]
    assert not Event.objects.filter(run=run, type="ticket.decided").exists()
