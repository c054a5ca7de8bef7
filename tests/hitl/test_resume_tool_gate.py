"""HITL-10 (and HITL-5's "bound to the exact call"): on resume the live tool gate runs again.
An approved call whose tool was removed from the configuration, disabled, or changed
version while the run waited is not executed; the model gets a "not permitted" result and
the same run goes on."""

from __future__ import annotations

import dataclasses

import pytest

from agentruns.models import Note, Run, Ticket, ToolInvocation
from agentruns.runtime.loop import execute_run
from agentruns.tools.registry import REGISTRY
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.hitl import active_ticket, allow, client_for, results_by_call, resume, write_call
from tests.support.runs import park

pytestmark = pytest.mark.django_db

TURNS = [{"tool_calls": [write_call("gated", call_id="call_w")]}, {"text": "done"}]


@pytest.fixture
def approver(staff):
    return grant(staff, "approve_run")


@pytest.fixture
def config(db):
    return scripted_configuration("g", TURNS, allowed_tools=["notes.write", "notes.read"])


@pytest.fixture
def approved(approver, config):
    run = park(approver, "g")
    response = resume(client_for(approver), run.pk, allow(active_ticket(run.pk)))
    assert response.status_code == 200, response.json()
    return run


def assert_not_permitted_and_run_goes_on(run, reason):
    assert execute_run(run.pk) == "completed"
    assert Run.objects.get(pk=run.pk).final_reply == "done"
    assert Note.objects.count() == 0
    result = results_by_call(run.pk)["call_w"]
    assert result["status"] == "not_permitted"
    assert reason in result["content"]
    invocation = ToolInvocation.objects.get(run=run, call_id="call_w")
    assert invocation.status == ToolInvocation.Status.NOT_PERMITTED


def test_hitl10_control_an_unchanged_grant_runs_the_approved_call(approved):
    assert execute_run(approved.pk) == "completed"
    assert Note.objects.count() == 1


def test_hitl10_tool_removed_from_the_configuration(approved, config):
    config.allowed_tools = ["notes.read"]
    config.save()
    assert_not_permitted_and_run_goes_on(approved, "not allowed")


def test_hitl10_tool_disabled_no_longer_registered(approved, monkeypatch):
    monkeypatch.delitem(REGISTRY._tools, "notes.write")
    monkeypatch.delitem(REGISTRY._by_wire, "notes_write")
    assert_not_permitted_and_run_goes_on(approved, "Unknown tool")


def test_hitl10_tool_changed_version(approved, monkeypatch):
    tool = REGISTRY.get("notes.write")
    monkeypatch.setitem(REGISTRY._tools, "notes.write", dataclasses.replace(tool, version="2"))
    assert_not_permitted_and_run_goes_on(approved, "changed version")


def test_hitl5_an_approval_covers_only_the_exact_call_it_showed(approved):
    # The answered ticket no longer describes this call's arguments.
    Ticket.objects.filter(run=approved, call_id="call_w").update(arguments_digest="0" * 64)
    assert_not_permitted_and_run_goes_on(approved, "exact call")
