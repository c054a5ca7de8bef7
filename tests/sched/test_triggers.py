"""SCHED-4 (signed triggers), SCHED-1's API and SCHED-5 (a run says what started it)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from rest_framework.test import APIClient

from agentruns.models import Event, Run, Schedule, Trigger, TriggerFiring
from agentruns.services.triggers import MAX_BODY_BYTES, sign
from tests.conftest import grant
from tests.support.catalog import scripted_configuration

pytestmark = pytest.mark.django_db

SECRET = "a-long-random-trigger-secret"


@pytest.fixture
def trigger(member):
    configuration = scripted_configuration("alerts", [{"text": "ok"}])
    return Trigger.objects.create(
        slug="deploy", configuration=configuration, owner=member, secret=SECRET
    )


def fire(body: bytes, *, secret: str = SECRET, at: float | None = None, signature=None):
    timestamp = str(int(time.time() if at is None else at))
    headers: dict[str, Any] = {
        "HTTP_X_AGENTRUNS_TIMESTAMP": timestamp,
        "HTTP_X_AGENTRUNS_SIGNATURE": signature or sign(secret, timestamp, body),
    }
    return APIClient(enforce_csrf_checks=True).post(
        "/api/triggers/deploy/fire/", body, content_type="application/json", **headers
    )


def test_sched4_a_signed_request_starts_a_run_for_the_owner_with_the_body_redacted(trigger, member):
    body = json.dumps({"alert": "disk full", "token": "ghp_" + "a" * 36}).encode()
    response = fire(body)
    assert response.status_code == 202, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert run.created_by == member
    assert run.trigger == {"kind": "trigger", "slug": "deploy"}
    assert "disk full" in run.input and "ghp_" not in run.input
    assert Event.objects.filter(run=run, type="secret.redacted").exists()


@pytest.mark.parametrize(
    "case",
    ["wrong secret", "stale", "future", "no signature", "not a number", "body changed"],
)
def test_sched4_bad_and_stale_signatures_are_401_and_start_nothing(trigger, case):
    body = b'{"alert": "x"}'
    now = time.time()
    response = {
        "wrong secret": lambda: fire(body, secret="another-secret-of-length"),
        "stale": lambda: fire(body, at=now - 305),
        "future": lambda: fire(body, at=now + 305),
        "no signature": lambda: fire(body, signature=" "),
        "not a number": lambda: APIClient().post(
            "/api/triggers/deploy/fire/",
            body,
            content_type="application/json",
            HTTP_X_AGENTRUNS_TIMESTAMP="soon",
            HTTP_X_AGENTRUNS_SIGNATURE=sign(SECRET, "soon", body),
        ),
        "body changed": lambda: fire(
            b'{"alert": "y"}', signature=sign(SECRET, str(int(now)), body)
        ),
    }[case]()
    assert response.status_code == 401
    assert response.json()["code"] == "bad_signature"
    assert not Run.objects.exists()
    assert not TriggerFiring.objects.exists()


def test_sched4_a_replayed_signature_answers_the_first_run_and_starts_nothing(trigger):
    body = b'{"alert": "once"}'
    at = time.time()
    first = fire(body, at=at)
    again = fire(body, at=at)
    capitals = fire(body, at=at, signature=sign(SECRET, str(int(at)), body).upper() + " ")
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"] == capitals.json()["id"]
    assert Run.objects.count() == 1
    assert TriggerFiring.objects.get().signature == sign(SECRET, str(int(at)), body)[7:]


def test_sched4_a_body_over_64_kb_is_413_and_starts_nothing(trigger):
    body = json.dumps({"x": "a" * MAX_BODY_BYTES}).encode()
    assert fire(body).status_code == 413
    assert not Run.objects.exists()


def test_sched4_a_deactivated_owners_trigger_starts_nothing(trigger, member):
    member.is_active = False
    member.save()
    response = fire(b"{}")
    assert response.status_code == 403
    assert not Run.objects.exists()


def test_sched4_triggers_count_against_the_owners_submissions(trigger, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"submit": "2/minute", "resume": "600/minute"},
    }
    codes = [fire(json.dumps({"n": n}).encode()).status_code for n in range(3)]
    assert codes == [202, 202, 429]
    assert Run.objects.count() == 2


def test_sched4_the_secret_is_write_only_and_writes_need_model_permissions(staff, member):
    scripted_configuration("cfg", [{"text": "ok"}])
    client = APIClient()
    client.force_authenticate(staff)
    body = {"slug": "hook", "configuration": "cfg", "secret": SECRET}
    assert client.post("/api/triggers/", body, format="json").status_code == 403
    grant(staff, "add_trigger", "view_trigger")
    created = client.post("/api/triggers/", body, format="json")
    assert created.status_code == 201, created.content
    assert "secret" not in created.json() and created.json()["owner"] == "staff"
    assert "secret" not in client.get("/api/triggers/hook/").json()
    other = client.post("/api/triggers/", {**body, "slug": "h2", "owner": "member"}, format="json")
    assert other.status_code == 400  # only a superuser may make runs start as someone else


def test_sched1_schedules_api_validates_and_shows_next_run_and_skips(staff):
    scripted_configuration("cfg", [{"text": "ok"}])
    client = APIClient()
    client.force_authenticate(grant(staff, "add_schedule", "view_schedule"))
    base = {"name": "n", "configuration": "cfg", "input": "report"}
    assert client.post("/api/schedules/", {**base, "interval_seconds": 59}).status_code == 400
    assert client.post("/api/schedules/", {**base, "cron": "* * *"}).status_code == 400
    both = {**base, "cron": "0 9 * * *", "interval_seconds": 3600}
    assert client.post("/api/schedules/", both).status_code == 400
    zone = {**base, "cron": "0 9 * * *", "timezone": "Mars/Olympus"}
    assert client.post("/api/schedules/", zone).status_code == 400
    good = client.post("/api/schedules/", {**base, "cron": "0 9 * * *", "timezone": "Asia/Tokyo"})
    assert good.status_code == 201, good.content
    data = good.json()
    assert data["owner"] == "staff" and data["catch_up"] == "skip"
    assert data["next_run_at"] and data["last_run"] is None and data["skips"] == []
    assert Schedule.objects.get().next_run_at.astimezone().minute == 0


def test_sched5_the_run_api_says_what_started_a_run(trigger, member):
    response = fire(b'{"alert": "x"}')
    client = APIClient()
    client.force_authenticate(member)
    detail = client.get(f"/api/runs/{response.json()['id']}/").json()
    assert detail["trigger"] == {"kind": "trigger", "slug": "deploy"}
