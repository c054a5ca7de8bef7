"""HITL-11: cancelling a queued or awaiting run ends it `cancelled` and voids its ticket; a
later resume gets `not_awaiting`; a finished run cannot be cancelled (409); only the
initiator or an approver may cancel."""

from __future__ import annotations

import pytest

from agentruns.models import Note, Run, Ticket, ToolInvocation
from agentruns.runtime import faults
from agentruns.runtime.loop import execute_run
from agentruns.services.runs import run_cancel
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.crash import fault_hook, provider_pairing_problems
from tests.support.hitl import (
    active_ticket,
    allow,
    client_for,
    deny,
    picture,
    results_by_call,
    resume,
    run_events,
    write_call,
)
from tests.support.runs import park, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def approver(staff):
    return grant(staff, "approve_run")


@pytest.fixture(autouse=True)
def config(db):
    return scripted_configuration(
        "c", [{"tool_calls": [write_call("x", call_id="call_w")]}, {"text": "done"}]
    )


def cancel(user, run_id):
    return client_for(user).post(f"/api/runs/{run_id}/cancel/")


def test_hitl11_cancelling_a_queued_run(member, approver):
    run = submit(member, "c")
    response = cancel(member, run.pk)
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "cancelled"
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert [e.type for e in run_events(run.pk)][-1] == "run.cancelled"
    assert execute_run(run.pk) is None  # a stale wake-up finds nothing to do
    body = {
        "correlation_id": "00000000-0000-4000-8000-000000000000",
        "run": run.pk,
        "snapshot_id": "s",
        "catalog_fingerprint": "f",
        "call_id": "call_w",
        "result": {"kind": "permission", "decision": "allow"},
    }
    late = resume(client_for(approver), run.pk, body)
    assert late.status_code == 409 and late.json()["code"] == "not_awaiting"


def test_hitl11_cancelling_an_awaiting_run_voids_its_ticket(approver):
    run = park(approver, "c")
    ticket = active_ticket(run.pk)
    response = cancel(approver, run.pk)
    assert response.status_code == 200, response.json()
    assert response.json()["ticket"] is None
    run.refresh_from_db()
    ticket.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert ticket.status == Ticket.Status.VOID
    assert (run.lease_owner, run.lease_expires_at) == ("", None)
    # The thread stays usable: the open call got a result, then the run ended.
    types = [e.type for e in run_events(run.pk)]
    assert types[-2:] == ["tool.result", "run.cancelled"]
    assert results_by_call(run.pk)["call_w"]["status"] != "ok"

    before = picture(run.pk)
    for body in (allow(ticket), deny(ticket, "late")):
        late = resume(client_for(approver), run.pk, body)
        assert late.status_code == 409 and late.json()["code"] == "not_awaiting"
    assert picture(run.pk) == before
    assert execute_run(run.pk) is None
    assert Note.objects.count() == 0
    assert not ToolInvocation.objects.filter(run=run, status="completed").exists()


def test_hitl11_an_allowed_run_cancelled_before_a_worker_took_it_never_runs_the_tool(approver):
    run = park(approver, "c")
    assert resume(client_for(approver), run.pk, allow(active_ticket(run.pk))).status_code == 200
    assert Run.objects.get(pk=run.pk).status == Run.Status.QUEUED
    assert cancel(approver, run.pk).status_code == 200
    assert execute_run(run.pk) is None
    assert Run.objects.get(pk=run.pk).status == Run.Status.CANCELLED
    assert Note.objects.count() == 0
    assert results_by_call(run.pk)["call_w"]["status"] == "error"


def test_hitl11_a_cancelled_threads_next_run_may_start(approver):
    run = park(approver, "c")
    assert cancel(approver, run.pk).status_code == 200
    again = submit(approver, "c", thread=run.thread_id)
    assert again.status == Run.Status.QUEUED


@pytest.mark.parametrize("outcome", ["completed", "failed", "cancelled"])
def test_hitl11_cancelling_a_finished_run_is_409(approver, outcome):
    if outcome == "completed":
        run = park(approver, "c")
        resume(client_for(approver), run.pk, deny(active_ticket(run.pk)))
        assert execute_run(run.pk) == "completed"
    elif outcome == "failed":
        scripted_configuration("broken", [{"error": {"status": 400, "message": "bad"}}])
        run = submit(approver, "broken")
        assert execute_run(run.pk) == "failed"
    else:
        run = submit(approver, "c")
        assert cancel(approver, run.pk).status_code == 200
    before = picture(run.pk)
    response = cancel(approver, run.pk)
    assert response.status_code == 409
    assert response.json()["code"] == "conflict"
    assert picture(run.pk) == before
    assert Run.objects.get(pk=run.pk).status == outcome


def test_hitl11_the_initiator_without_approve_run_may_cancel_their_own(member):
    run = park(member, "c")
    assert cancel(member, run.pk).status_code == 200
    assert Run.objects.get(pk=run.pk).status == Run.Status.CANCELLED


def test_hitl11_an_approver_may_cancel_someone_elses_run(member, approver):
    run = park(member, "c")
    assert cancel(approver, run.pk).status_code == 200
    assert Run.objects.get(pk=run.pk).status == Run.Status.CANCELLED


def test_hitl11_a_viewer_who_is_neither_may_not_cancel(member, django_user_model):
    viewer = grant(django_user_model.objects.create_user("viewer"), "view_all_runs")
    run = park(member, "c")
    before = picture(run.pk)
    response = cancel(viewer, run.pk)
    assert response.status_code == 403
    assert response.json()["code"] == "not_permitted"
    assert picture(run.pk) == before


def test_hitl11_a_user_who_cannot_see_the_run_gets_404(member, django_user_model):
    outsider = django_user_model.objects.create_user("outsider")
    run = park(member, "c")
    before = picture(run.pk)
    assert cancel(outsider, run.pk).status_code == 404
    assert picture(run.pk) == before


def test_hitl11_a_cancelled_runs_allowed_call_is_not_left_executing(approver):
    run = park(approver, "c")
    assert resume(client_for(approver), run.pk, allow(active_ticket(run.pk))).status_code == 200
    assert cancel(approver, run.pk).status_code == 200
    invocation = ToolInvocation.objects.get(run=run, call_id="call_w")
    assert invocation.status != ToolInvocation.Status.EXECUTING
    assert invocation.completed_at is not None


MIXED_TURN = {
    "tool_calls": [
        write_call("x", call_id="call_w"),  # needs an approver: parks the run...
        {"id": "call_e", "name": "test.echo", "arguments": {"text": "hi"}},  # ...after this
    ]
}


@pytest.mark.parametrize(
    ("point", "lands"),
    [
        pytest.param(faults.TOOL_DONE, lambda seen: True, id="while-the-call-runs"),
        pytest.param(
            faults.COMMIT,
            lambda seen: faults.TOOL_DONE in seen,  # held, to go with the ticket
            id="after-the-last-result-was-recorded",
        ),
    ],
)
def test_hitl11_a_cancel_landing_while_a_turns_calls_run_never_parks_the_run(
    approver, point, lands
):
    """HITL-11, HITL-1, LOOP-7: the turn's first call needs an approver, so once its other
    calls ran the run would park. A cancel that lands while they run (or just after the
    last result was recorded, before the ticket) ends the run `cancelled` instead: no ticket
    is ever opened, the call that ran keeps its result, the waiting one gets an
    'interrupted' result, and the history stays paired. OPS-5: `run.cancelled` names who
    asked, as a parked cancel's does."""
    scripted_configuration("mixed", [MIXED_TURN, {"text": "never asked"}])
    run = submit(approver, "mixed")
    cancelled = []
    seen: list[str] = []

    def hook(name: str, count: int) -> None:
        seen.append(name)
        if name == point and not cancelled and lands(seen[:-1]):
            cancelled.append(run_cancel(user=approver, run_id=run.pk).status)

    with fault_hook(hook):
        outcome = execute_run(run.pk)

    assert cancelled == [Run.Status.RUNNING]
    assert outcome == Run.Status.CANCELLED
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert not Ticket.objects.filter(run=run).exists()
    results = results_by_call(run.pk)
    assert results["call_e"]["status"] == "ok"
    assert results["call_w"]["status"] == "error"
    assert not Note.objects.exists()
    last = run_events(run.pk)[-1]
    assert (last.type, last.payload) == ("run.cancelled", {"by": "staff"})  # OPS-5: who asked
    assert provider_pairing_problems(run.pk) == []
    invocation = ToolInvocation.objects.get(run=run, call_id="call_w")
    assert invocation.status == ToolInvocation.Status.INTERRUPTED
