"""UI-2, HITL-7: a run page that tells the truth about a wait. Every second a ticket is open
is a wait: people's, a delegation's for its child runs, an `agent.wait` timer's for its time;
the wait before its first reminder, escalation or partial approval too. An expired ticket
says it expired and by when, never "by None", and the scripted model does not claim that an
approver decided."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from agentruns import events as ev
from agentruns.demo import load_demo_data
from agentruns.models import Configuration, Event, Run, Ticket
from agentruns.runtime.loop import execute_run
from agentruns.services.reminders import tickets_remind_and_escalate
from agentruns.services.resume import ticket_expire_due
from agentruns.services.timers import timers_due
from playground.timeline import time_split
from tests.support.catalog import scripted_configuration
from tests.support.runs import park

pytestmark = pytest.mark.django_db

# Seconds after the run was created at which each event is dated.
OPENED, REMINDED, EXPIRED, ENDED = 2.0, 32.0, 130.0, 131.0


def seconds(page: str, label: str) -> float:
    found = re.search(rf'aria-label="{label}: ([0-9.]+) seconds', page)
    assert found, label
    return float(found.group(1))


def waited(staff) -> tuple[Run, datetime]:
    """An approval-demo run whose ticket was reminded of, then expired at its deadline,
    and the run completed; its log spread over two minutes as a real wait would be."""
    load_demo_data()
    Configuration.objects.filter(slug="approval-demo").update(remind_after_seconds=0)
    run = park(staff, "approval-demo")
    assert tickets_remind_and_escalate() == (1, 0)
    deadline = timezone.now() - timedelta(seconds=1)
    Ticket.objects.filter(run=run).update(deadline=deadline)
    assert ticket_expire_due() == 1
    assert execute_run(run.pk) == Run.Status.COMPLETED
    log = spread(run, {ev.TICKET_REMINDED: [REMINDED]})
    assert [event.type for event in log] == [
        ev.USER, ev.ASSISTANT, ev.TICKET_OPENED, ev.TICKET_REMINDED, ev.TICKET_DECIDED,
        ev.TOOL_RESULT, ev.ASSISTANT, ev.RUN_COMPLETED,
    ]  # fmt: skip
    return run, deadline


def test_ui2_every_second_a_ticket_is_open_is_waiting_for_people(client, staff):
    run, _ = waited(staff)
    client.force_login(staff)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert seconds(page, "Waiting for people") == EXPIRED - OPENED  # before the reminder too
    assert seconds(page, "Queue and bookkeeping") == 0
    assert seconds(page, "Model") == OPENED + ENDED - EXPIRED


def test_hitl7_an_expired_ticket_says_by_when_and_the_model_claims_no_decision(client, staff):
    run, deadline = waited(staff)
    client.force_login(staff)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    when = deadline.strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"expired (no decision by {when})" in page
    assert "by None" not in page
    inspector = client.get(f"/playground/runs/{run.pk}/").content.decode()
    assert f"Expired (no decision by {when})" in inspector and "by None" not in inspector
    reply = Run.objects.get(pk=run.pk).final_reply
    assert "decided" not in reply and "approval" in reply


def test_ui2_the_time_a_parent_waits_for_its_child_is_its_own_line_DEL_1(client, staff):
    """Nobody answers a delegation ticket: the parent's wait for its child run is not
    people's time."""
    child = scripted_configuration("lookup", [{"text": "the owner is Ada"}])
    delegate = {"name": "agent.delegate", "arguments": {"configuration": "lookup", "task": "t"}}
    scripted_configuration("triage", [{"tool_calls": [delegate]}, {"text": "triaged"}])
    Configuration.objects.get(slug="triage").delegates.set([child])
    run = park(staff, "triage")
    assert execute_run(Run.objects.get(parent=run).pk) == Run.Status.COMPLETED
    assert execute_run(run.pk) == Run.Status.COMPLETED
    spread(run)
    client.force_login(staff)

    page = client.get(f"/runs/{run.pk}/").content.decode()

    assert seconds(page, "Waiting for child runs") == EXPIRED - OPENED
    assert seconds(page, "Waiting for people") == 0


def test_ui2_the_time_a_run_waits_on_its_timer_is_its_own_line_SCHED_3(client, staff):
    """Nobody answers an `agent.wait` timer: the run's wait for its due time is not
    people's time."""
    wait = {"id": "call_wait", "name": "agent.wait", "arguments": {"seconds": 60}}
    scripted_configuration(
        "nap", [{"tool_calls": [wait]}, {"text": "rested"}], allowed_tools=["agent"]
    )
    run = park(staff, "nap")
    Ticket.objects.filter(run=run).update(deadline=timezone.now() - timedelta(seconds=1))
    assert timers_due() == 1
    assert execute_run(run.pk) == Run.Status.COMPLETED
    log = spread(run)
    client.force_login(staff)

    page = client.get(f"/runs/{run.pk}/").content.decode()

    assert seconds(page, "Waiting for its time") == EXPIRED - OPENED
    assert seconds(page, "Waiting for people") == 0
    # A person's ticket open beside the timer (as a log may say) makes it people's time.
    asked = ev.TicketOpened("c", "call_ask", Ticket.Kind.TOOL_PERMISSION, "ask", None)
    answered = ev.TicketDecided("c", "call_ask", ev.ALLOW, by="ada")
    beside = [
        Event(type=data.TYPE, payload=data.to_payload(), created_at=at.created_at)
        for data, at in ((asked, log[2]), (answered, log[3]))
    ]
    both = [*log[:3], beside[0], log[3], beside[1], *log[4:]]
    split = {t["key"]: t["seconds"] for t in time_split(run, both, timezone.now())}
    assert (split["people"], split["timer"]) == (EXPIRED - OPENED, 0)


def spread(run: Run, more: dict[str, list[float]] | None = None) -> list[Event]:
    """Date a run's log, one model turn parked on one ticket, over two minutes, as a real
    wait would be (`more`: the seconds of other event types); the log as dated."""
    start = Run.objects.get(pk=run.pk).created_at
    log = list(Event.objects.filter(run=run).order_by("sequence"))
    dates = {
        ev.USER: [0.0],
        ev.ASSISTANT: [OPENED, ENDED],
        ev.TICKET_OPENED: [OPENED],
        ev.TICKET_DECIDED: [EXPIRED],
        ev.TOOL_RESULT: [EXPIRED],
        ev.RUN_COMPLETED: [ENDED],
        **(more or {}),
    }
    for event in log:
        event.created_at = start + timedelta(seconds=dates[event.type].pop(0))
        Event.objects.filter(pk=event.pk).update(created_at=event.created_at)
    return log
