"""HITL-5 with TOOL-4 and REC-1 across a worker crash after an approval: the approved call
runs exactly once, or — when its external effect may have happened — becomes `uncertain`
and is never repeated; either way the run completes.

The allow is committed by this process (the API); a child worker process executing the
resumed run is SIGKILLed (a) after claiming the run, before the tool started, and (b) right
after the tool ran. Its lease is then expired and the run recovered in this process."""

from __future__ import annotations

import pytest

from agentruns.models import Event, Note, Run, ToolInvocation
from agentruns.runtime.loop import execute_run
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.crash import claim_and_die, effect_lines, expire_lease, run_child
from tests.support.hitl import active_ticket, allow, client_for, results_by_call, resume
from tests.support.runs import park

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NOTE = {"id": "call_note", "name": "notes.write", "arguments": {"title": "once", "body": "b"}}
EXTERNAL = {"id": "call_ext", "name": "test.external_write", "arguments": {"value": "v1"}}


@pytest.fixture
def approver(staff):
    return grant(staff, "approve_run")


@pytest.fixture
def effects(tmp_path, monkeypatch):
    path = tmp_path / "effects"
    monkeypatch.setenv("AGENTRUNS_TEST_EFFECT_FILE", str(path))
    return path


def approved(user, call):
    """A run parked on `call` (approval needed: nothing is exempt), then allowed."""
    scripted_configuration(
        "crash", [{"tool_calls": [call]}, {"text": "done"}], allowed_tools=[call["name"]]
    )
    run = park(user, "crash")
    assert active_ticket(run.pk).tool == call["name"]
    response = resume(client_for(user), run.pk, allow(active_ticket(run.pk)))
    assert response.status_code == 200, response.json()
    return run


def recover(run):
    expire_lease(run.pk)
    assert execute_run(run.pk) == Run.Status.COMPLETED
    run.refresh_from_db()
    assert run.final_reply == "done"
    assert run.attempts == 1  # one crash reclaim


def one_result(run, call_id):
    results = Event.objects.filter(run=run, type="tool.result", payload__call_id=call_id)
    assert results.count() == 1
    return results.get().payload


def test_notes_write_worker_dies_before_the_tool_runs(approver):
    run = approved(approver, NOTE)
    child = claim_and_die(run.pk)
    assert child.killed and "claimed" in child.stdout, str(child)
    assert Note.objects.count() == 0
    recover(run)
    assert Note.objects.filter(run=run, call_id="call_note").count() == 1
    assert one_result(run, "call_note")["status"] == "ok"


def test_notes_write_worker_dies_right_after_the_tool_ran(approver):
    run = approved(approver, NOTE)
    # notes.write commits its Note with its result (TOOL-4): the first commit point after
    # the resume is that transaction, so the worker dies right after the tool ran.
    child = run_child(run.pk, faults="commit:1")
    assert child.killed, str(child)
    assert Note.objects.count() == 1
    recover(run)
    assert Note.objects.filter(run=run).count() == 1
    assert one_result(run, "call_note")["status"] == "ok"


def test_external_write_worker_dies_before_the_tool_runs(approver, effects):
    run = approved(approver, EXTERNAL)
    child = claim_and_die(run.pk)
    assert child.killed and "claimed" in child.stdout, str(child)
    assert effect_lines(effects, run.pk) == []
    assert ToolInvocation.objects.get(run=run).effect_sent_at is None
    recover(run)
    assert effect_lines(effects, run.pk) == [f"{run.pk}:call_ext:v1"]
    assert one_result(run, "call_ext")["status"] == "ok"
    assert ToolInvocation.objects.get(run=run).status == ToolInvocation.Status.COMPLETED


def test_external_write_worker_dies_at_tool_done_uncertain_never_twice(approver, effects):
    run = approved(approver, EXTERNAL)
    child = run_child(run.pk, faults="tool_done:1", effect_file=effects)
    assert child.killed, str(child)
    assert len(effect_lines(effects, run.pk)) == 1  # the effect happened
    recover(run)
    assert len(effect_lines(effects, run.pk)) == 1  # and only once
    result = one_result(run, "call_ext")
    assert result["status"] == "uncertain"
    invocation = ToolInvocation.objects.get(run=run)
    assert invocation.status == ToolInvocation.Status.UNCERTAIN
    body = client_for(approver).get(f"/api/runs/{run.pk}/").json()
    assert [c["call_id"] for c in body["uncertain_calls"]] == ["call_ext"]


def test_external_write_worker_dies_after_effect_sent_uncertain_not_a_second_effect(
    approver, effects
):
    run = approved(approver, EXTERNAL)
    child = run_child(run.pk, faults="effect_sent:1", effect_file=effects)
    assert child.killed, str(child)
    assert ToolInvocation.objects.get(run=run).effect_sent_at is not None
    assert effect_lines(effects, run.pk) == []
    recover(run)
    assert effect_lines(effects, run.pk) == []  # never re-run automatically
    assert one_result(run, "call_ext")["status"] == "uncertain"
    assert results_by_call(run.pk)["call_ext"]["content"].startswith("Outcome unknown")
