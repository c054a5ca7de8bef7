from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from agentruns.models import Note, Run, Ticket
from agentruns.runtime.loop import execute_run
from agentruns.services.reminders import tickets_remind_and_escalate
from tests.conftest import grant
from tests.support.catalog import make_configuration, make_provider
from tests.support.runs import submit

pytestmark = pytest.mark.django_db


def test_allow_then_deny_in_one_turn_reach_the_model_in_order(api, staff):
    grant(staff, "approve_run")
    make_configuration(
        "c",
        provider=make_provider("s", zone="local"),
        allowed_tools=["notes"],
        script={
            "turns": [
                {
                    "tool_calls": [
                        {"name": "notes.write", "arguments": {"title": "a", "body": "1"}},
                        {"name": "notes.write", "arguments": {"title": "b", "body": "2"}},
                    ]
                },
                {"text": "done"},
            ]
        },
    )
    run_id = api.post("/api/runs/", {"configuration": "c", "input": "go"}, format="json").json()[
        "id"
    ]
    assert execute_run(run_id) == "awaiting"
    first = api.get(f"/api/runs/{run_id}/").json()["ticket"]
    body = {k: first[k] for k in ("correlation_id", "run", "snapshot_id", "catalog_fingerprint")}
    allow = {
        **body,
        "call_id": first["target"]["call_id"],
        "result": {"kind": "permission", "decision": "allow"},
    }
    assert api.post(f"/api/runs/{run_id}/resume/", allow, format="json").status_code == 200
    again = api.post(f"/api/runs/{run_id}/resume/", allow, format="json")
    assert again.status_code == 409 and again.json()["code"] == "not_awaiting"
    assert execute_run(run_id) == "awaiting"
    second = api.get(f"/api/runs/{run_id}/").json()["ticket"]
    assert second["target"]["call_id"] != first["target"]["call_id"]
    body = {k: second[k] for k in ("correlation_id", "run", "snapshot_id", "catalog_fingerprint")}
    deny = {
        **body,
        "call_id": second["target"]["call_id"],
        "result": {"kind": "permission", "decision": "deny", "note": "no"},
    }
    assert api.post(f"/api/runs/{run_id}/resume/", deny, format="json").status_code == 200
    assert execute_run(run_id) == "completed"
    assert Run.objects.get(pk=run_id).final_reply == "done"
    assert list(Note.objects.values_list("title", flat=True)) == ["a"]


def test_hitl15_reminders_escalation_and_the_team_inbox_run_on_either_database(staff, client):
    """The embedded default (SQLite) runs this too: the sweeper's due times and the
    escalation route are date arithmetic each database must accept (a reminder's
    `remind_after_seconds * 1 s` once raised on SQLite in every sweep)."""
    grant(staff, "approve_run")
    night = Group.objects.create(name="night-shift")
    staff.groups.add(night)
    make_configuration(
        "team",
        provider=make_provider("t", zone="local"),
        allowed_tools=["notes"],
        remind_after_seconds=60,
        escalation_group=night,
        approval_timeout_seconds=100,
        script={
            "turns": [
                {"tool_calls": [{"name": "notes.write", "arguments": {"title": "t", "body": "b"}}]}
            ]
        },
    )
    run = submit(staff, "team")
    assert execute_run(run.pk) == "awaiting"
    ticket = Ticket.objects.get(run=run)
    Ticket.objects.filter(pk=ticket.pk).update(
        created_at=timezone.now() - timedelta(seconds=90),
        deadline=timezone.now() + timedelta(seconds=10),
    )
    assert tickets_remind_and_escalate() == (1, 1)
    assert tickets_remind_and_escalate() == (0, 0)
    client.force_login(staff)
    page = client.get("/inbox/?kind=approval")
    assert page.status_code == 200
    assert str(ticket.correlation_id) in page.content.decode()
