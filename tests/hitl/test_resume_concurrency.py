"""HITL-4: of concurrent commands on one ticket exactly one succeeds; the others find no
active ticket. Twenty threads, each with its own database connection, released together."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from agentruns.bench.workload import allow_as_shown
from agentruns.errors import NotAwaiting
from agentruns.models import Event, Note, Run, Ticket, ToolInvocation
from agentruns.runtime.loop import execute_run
from agentruns.services.resume import run_resume
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.hitl import active_ticket, allow, client_for, resume, write_call
from tests.support.runs import park

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 20


@pytest.fixture
def approvers(django_user_model):
    return [
        grant(django_user_model.objects.create_user(f"approver{i}"), "approve_run")
        for i in range(4)
    ]


def parked_run(user):
    scripted_configuration("c", [{"tool_calls": [write_call("once")]}, {"text": "done"}])
    return park(user, "c")


def together(work):
    """Run `work(i)` in THREADS threads released by one barrier; each closes its connection."""
    barrier = threading.Barrier(THREADS)

    def one(i):
        try:
            barrier.wait(timeout=30)
            return work(i)
        finally:
            connection.close()

    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(one, range(THREADS)))


def assert_one_allow_then_one_effect(run_id):
    decided = Event.objects.filter(run_id=run_id, type="ticket.decided").count()
    assert decided == 1
    assert Ticket.objects.get(run_id=run_id).status == Ticket.Status.ANSWERED
    assert Run.objects.get(pk=run_id).status == Run.Status.QUEUED
    assert execute_run(run_id) == "completed"
    assert Note.objects.filter(run_id=run_id).count() == 1
    assert ToolInvocation.objects.get(run_id=run_id).status == ToolInvocation.Status.COMPLETED
    results = Event.objects.filter(run_id=run_id, type="tool.result")
    assert [r.payload["status"] for r in results] == ["ok"]


def test_hitl4_twenty_concurrent_api_allows_one_wins(approvers):
    run = parked_run(approvers[0])
    body = allow(active_ticket(run.pk))

    def post(i):
        response = resume(client_for(approvers[i % len(approvers)]), run.pk, body)
        return response.status_code, response.json().get("code")

    outcomes = together(post)
    assert Counter(outcomes) == {(200, None): 1, (409, "not_awaiting"): THREADS - 1}, outcomes
    assert_one_allow_then_one_effect(run.pk)


def test_hitl4_twenty_concurrent_service_commands_one_wins(approvers):
    run = parked_run(approvers[0])
    ticket = active_ticket(run.pk)
    command = allow_as_shown(ticket)

    def call(i):
        try:
            run_resume(user=approvers[i % len(approvers)], run_id=run.pk, command=command)
        except NotAwaiting:
            return "not_awaiting"
        return "ok"

    outcomes = together(call)
    assert Counter(outcomes) == {"ok": 1, "not_awaiting": THREADS - 1}
    assert_one_allow_then_one_effect(run.pk)
