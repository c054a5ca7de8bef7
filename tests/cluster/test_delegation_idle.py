"""DEL-1, CLU-3: a parent waiting a day for its child holds nothing. On a real driver (the
cluster's per-process executor, threads and pool), the parent parks on its delegation and
the child on an approval whose deadline is a day away: no thread is busy, no run holds a
lease, and the child's approval the next morning brings both to their end."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentruns.cluster.driver import Driver
from agentruns.models import Run, Ticket
from agentruns.store.transitions import claim
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.clusters import wait_for
from tests.support.hitl import active_ticket, allow, client_for, resume
from tests.support.runs import submit

pytestmark = pytest.mark.django_db(transaction=True)

WRITE = {"name": "notes.write", "arguments": {"title": "t", "body": "b"}}
DELEGATE = {"name": "agent.delegate", "arguments": {"configuration": "lookup", "task": "find"}}


def drive(driver: Driver, run: Run) -> str:
    """One drive of `run` on the driver's threads, as a wake-up would start it."""
    assert driver.reserve(timeout=1)
    claimed = claim(run.pk)
    assert claimed is not None, f"run {run.pk} could not be claimed"
    driver.submit(claimed)
    wait_for(lambda: driver.busy == 0, timeout=30, what=f"run {run.pk}'s drive to end")
    return Run.objects.get(pk=run.pk).status


def test_del1_a_parent_waiting_a_day_on_its_child_holds_no_thread_and_no_lease(driver, staff):
    child_config = scripted_configuration("lookup", [{"tool_calls": [WRITE]}, {"text": "noted"}])
    parent_config = scripted_configuration("triage", [{"tool_calls": [DELEGATE]}, {"text": "ok"}])
    parent_config.delegates.set([child_config])
    approver = grant(staff, "approve_run")
    parent = submit(approver, "triage")

    assert drive(driver, parent) == Run.Status.AWAITING
    child = Run.objects.get(parent=parent)
    assert drive(driver, child) == Run.Status.AWAITING
    ticket = active_ticket(child.pk)
    assert ticket.kind == Ticket.Kind.TOOL_PERMISSION
    assert ticket.deadline is not None
    assert ticket.deadline >= timezone.now() + timedelta(hours=23)  # a day's wait ahead

    # The whole tree is waiting: no executor thread is taken, no run holds a lease.
    assert driver.busy == 0
    leases = Run.objects.filter(pk__in=[parent.pk, child.pk]).values_list("lease_owner", flat=True)
    assert list(leases) == ["", ""]
    assert Run.objects.get(pk=parent.pk).status == Run.Status.AWAITING

    response = resume(client_for(approver), child.pk, allow(ticket))
    assert response.status_code in (200, 202), response.json()
    assert drive(driver, child) == Run.Status.COMPLETED
    assert Run.objects.get(pk=parent.pk).status == Run.Status.QUEUED  # woken by the hand-back
    assert drive(driver, parent) == Run.Status.COMPLETED
    assert Run.objects.get(pk=parent.pk).final_reply == "ok"
