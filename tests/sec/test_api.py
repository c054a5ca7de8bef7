"""SEC-2, SEC-3: bad parameters are 400s, never 500s; notes are visible iff their run is;
the events cursor only advances over durable events; throttles and request limits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.settings import api_settings
from rest_framework.test import APIClient

from agentruns.models import Configuration, Note
from tests.conftest import grant
from tests.support.catalog import make_configuration
from tests.support.runs import submit

pytestmark = pytest.mark.django_db


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.mark.parametrize(
    "path",
    [
        "/api/runs/?thread=abc",
        "/api/runs/?status=nonsense",
        "/api/runs/?thread=99999999999999999999",
        "/api/notes/?run=abc",
        "/api/runs/{run}/events/?after=abc",
        "/api/runs/{run}/events/?limit=-5",
        "/api/configurations/c/readout/?forced_snippets=1,x",
    ],
)
def test_sec3_a_bad_query_parameter_is_a_400(api, path, staff):
    """SEC-3: each was a 500 (or silently ignored) before a filter serializer checked it."""
    make_configuration("c")
    run = submit(staff, "c", "hello")
    response = api.get(path.format(run=run.pk))
    assert response.status_code == 400, (path, response.status_code, response.content)
    assert response.json()["code"] == "invalid"


def test_sec3_huge_pagination_values_are_no_database_error(api):
    response = api.get("/api/runs/?limit=99999999999999999999&offset=99999999999999999999")
    assert response.status_code == 200
    assert response.json()["results"] == []


@pytest.mark.parametrize("method", ["put", "patch"])
def test_sec3_a_null_script_is_refused_not_a_500(api, method):
    """SEC-3: multipart `script=null` reached the database as NULL (500). The API now
    parses JSON only (415 for a form, as the schema says) and a null script is a 400."""
    make_configuration("c")
    body = {"slug": "c", "name": "C", "script": None}
    response = getattr(api, method)("/api/configurations/c/", body, format="json")
    assert response.status_code == 400, response.content
    assert "script" in response.json()["fields"]
    form = {"slug": "c", "name": "C", "script": "null"}
    response = getattr(api, method)("/api/configurations/c/", form, format="multipart")
    assert response.status_code == 415, response.content
    assert Configuration.objects.get(slug="c").script == {}


def test_sec3_a_deeply_nested_body_is_malformed_not_a_500(api):
    body = "[" * 100_000 + "]" * 100_000
    response = api.post("/api/runs/", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "malformed"


def test_sec3_a_body_over_the_limit_is_413(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = json.dumps({"configuration": "c", "input": "x" * 2000})
    response = api.post("/api/runs/", body, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"


def test_sec3_too_many_query_fields_is_a_400(api):
    """DATA_UPLOAD_MAX_NUMBER_FIELDS bounds query strings and forms alike."""
    query = "&".join(f"f{i}=1" for i in range(300))
    assert api.get(f"/api/runs/?{query}").status_code == 400


def test_sec3_a_list_over_its_length_is_a_400(api):
    make_configuration("c")
    body = {"configuration": "c", "input": "x", "forced_snippets": list(range(1, 60))}
    response = api.post("/api/runs/", body, format="json")
    assert response.status_code == 400
    assert "forced_snippets" in response.json()["fields"]


def test_sec2_a_note_is_visible_iff_its_run_is(staff, member, django_user_model):
    """SEC-2: `is_staff` alone no longer shows every note."""
    make_configuration("c")
    theirs = submit(member, "c", "member's run")
    mine = submit(staff, "c", "staff's run")
    member_note = Note.objects.create(title="m", body="member", run=theirs)
    staff_note = Note.objects.create(title="s", body="staff", run=mine)
    Note.objects.create(title="loose", body="no run")

    def seen(user) -> set[int]:
        return {n["id"] for n in client_for(user).get("/api/notes/").json()["results"]}

    assert seen(staff) == {staff_note.pk}
    assert seen(member) == {member_note.pk}
    assert client_for(staff).get(f"/api/notes/{member_note.pk}/").status_code == 404
    viewer = grant(django_user_model.objects.create_user("viewer"), "view_all_runs")
    assert seen(viewer) == {staff_note.pk, member_note.pk}
    assert client_for(viewer).get(f"/api/notes/?run={theirs.pk}").json()["count"] == 1


def test_the_events_endpoint_makes_what_it_answers_durable(api, staff):
    """A cursor may only pass durable events: after reading, the endpoint commits a
    transaction with an xid under synchronous_commit=on (README "Operating safely")."""
    make_configuration("c")
    run = submit(staff, "c", "hello")
    with CaptureQueriesContext(connection) as queries:
        response = api.get(f"/api/runs/{run.pk}/events/")
    assert response.status_code == 200 and response.json()["events"]
    sql = [q["sql"] for q in queries.captured_queries]
    read = next(i for i, q in enumerate(sql) if "agentruns_event" in q)
    flush = next(i for i, q in enumerate(sql) if "txid_current" in q)
    assert read < flush
    assert any("synchronous_commit = on" in q for q in sql[read:flush])


def test_sec3_run_submission_is_throttled(api, settings):
    """A burst past the scoped rate answers 429 with Retry-After; reads are not throttled."""
    make_configuration("c")
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"submit": "3/minute", "resume": "3/minute"},
    }
    api_settings.reload()
    cache.clear()
    try:
        codes = [
            api.post("/api/runs/", {"configuration": "c", "input": "x"}, format="json").status_code
            for _ in range(3)
        ]
        assert codes == [201, 201, 201]
        response = api.post("/api/runs/", {"configuration": "c", "input": "x"}, format="json")
        assert response.status_code == 429
        assert "Retry-After" in response.headers
        assert api.get("/api/runs/").status_code == 200
    finally:
        cache.clear()


def test_check_deploy_is_clean_under_production_settings(tmp_path):
    """`manage.py check --deploy` with the production switches from the environment."""
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "AGENTRUNS_HTTPS": "1",
        "SECRET_KEY": "p" + "".join(chr(ord("a") + i % 26) for i in range(60)) + "Z9!x",
        "ALLOWED_HOSTS": "agentruns.example.com",
        "AGENTRUNS_VAR_DIR": str(tmp_path),
        "DEBUG": "0",
    }
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


@pytest.mark.parametrize(
    "url",
    [
        "/api/configurations/%00/",
        "/api/providers/a%00b/",
        "/api/runs/?status=%00",
        "/api/notes/?run=1%00",
        "/api/runs/1%00/",
    ],
)
def test_sec3_a_nul_in_a_path_or_query_is_a_400_not_a_500(api, url):
    response = api.get(url)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "malformed"


@pytest.mark.parametrize(
    "body",
    [
        {"slug": "nul", "name": "n\x00", "text": "t", "data_class": "public"},
        {"slug": "nul", "name": "n", "text": "t", "data_class": "public", "k\x00": 1},
        # A lone surrogate, escaped as the fuzzer sends it (no client can encode it raw).
        '{"slug": "nul", "name": "\\ud861", "text": "t", "data_class": "public"}',
    ],
)
def test_sec3_a_string_postgresql_cannot_store_is_a_400_not_a_500(api, body):
    if isinstance(body, str):
        response = api.post("/api/snippets/", body, content_type="application/json")
    else:
        response = api.post("/api/snippets/", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "malformed"


def test_sec3_a_nul_inside_a_json_field_is_a_400_not_a_500(api):
    """Found by schemathesis: a `script` key holding \\u0000 reached jsonb (500)."""
    response = api.post(
        "/api/configurations/",
        {"slug": "nul", "name": "n", "script": {"turns": [], "a\x00": 1}},
        format="json",
    )
    assert response.status_code == 400, response.content
