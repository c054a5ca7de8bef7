"""SEC-1, SEC-5, CG-11: a provider's key variable ends in _KEY or _TOKEN and is none of the
server's own secrets, checked on save (API and admin) and again where the key is read; a
planted provider key appears in no event, ticket, log line, API response or column."""

from __future__ import annotations

import json
import logging

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import connection

from agentruns.models import Note, Provider, Run
from agentruns.runtime.loop import execute_run
from tests.support.catalog import make_openai_configuration
from tests.support.fake_provider import FakeProvider
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

REFUSED = [
    "SECRET_KEY",
    "DATABASE_URL",
    "AGENTRUNS_PROVIDER_KEY",
    "EMAIL_HOST_PASSWORD",
    "CSRF_COOKIE_NAME",
    "OPENAI_API",  # not a key's name at all
    "sk-live-12345",
]


@pytest.mark.parametrize("name", REFUSED)
def test_staff_cannot_point_a_provider_at_a_server_secret(api, name):
    """SEC-5 over the API: refused with the field named, nothing stored."""
    body = {"slug": "p", "name": "P", "kind": "openai", "api_key_env": name}
    response = api.post("/api/providers/", body, format="json")
    assert response.status_code == 400, response.content
    assert "api_key_env" in response.json()["fields"]
    assert not Provider.objects.filter(slug="p").exists()


@pytest.mark.parametrize("name", REFUSED)
def test_the_admin_refuses_a_server_secret_too(name):
    """SEC-5 in the model: the admin's form runs the same validator (full_clean)."""
    provider = Provider(slug="p", name="P", kind="openai", api_key_env=name)
    with pytest.raises(ValidationError) as caught:
        provider.full_clean()
    assert "api_key_env" in caught.value.message_dict


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HF_TOKEN", ""])
def test_a_provider_key_name_is_accepted(api, name):
    body = {"slug": "p", "name": "P", "kind": "openai", "api_key_env": name}
    assert api.post("/api/providers/", body, format="json").status_code == 201


@pytest.fixture
def fake():
    with FakeProvider(default={"text": "ok"}) as server:
        yield server


@pytest.mark.parametrize("name", ["SECRET_KEY", "DATABASE_URL"])
def test_a_row_written_before_the_rule_fails_the_run_and_sends_nothing(
    staff, fake, monkeypatch, name
):
    """SEC-5 where the key is read: an old row naming a server secret fails the run with
    `provider_key_refused`; the fake provider sees no request, the secret is nowhere."""
    monkeypatch.setenv("DATABASE_URL", "postgres://u:dbpass-0123@h/db")
    configuration = make_openai_configuration("old", fake)
    Provider.objects.filter(pk=configuration.provider_id).update(api_key_env=name)
    run = submit(staff, "old", "hello")

    assert execute_run(run.pk) == Run.Status.FAILED

    run.refresh_from_db()
    assert run.failure["code"] == "provider_key_refused"
    assert name in run.failure["detail"]
    assert fake.requests == []
    from django.conf import settings

    assert settings.SECRET_KEY not in json.dumps(run.failure)
    assert "dbpass-0123" not in json.dumps(run.failure)


PLANTED = "sk-planted-" + "Q7w8E9r0T1y2U3i4O5p6A7s8"


def text_columns(*, skip: tuple[type, ...]) -> str:
    """Every text and JSON column of every table, as text."""
    texts: list[str] = []
    with connection.cursor() as cursor:
        for model in apps.get_models():
            if model in skip:
                continue
            columns = [
                f.column
                for f in model._meta.concrete_fields
                if f.get_internal_type() in {"CharField", "TextField", "JSONField", "SlugField"}
            ]
            if not columns:
                continue
            listed = ", ".join(f'"{c}"::text' for c in columns)
            cursor.execute(f'SELECT {listed} FROM "{model._meta.db_table}"')
            texts.extend(str(value) for row in cursor.fetchall() for value in row)
    return "\n".join(texts)


def test_a_planted_provider_key_is_stored_sent_and_logged_nowhere(api, staff, monkeypatch, caplog):
    """SEC-1, CG-11: the key is read from the environment only for the wire; an error body
    echoing it, a reply repeating it and a tool result holding it are all redacted before
    anything is stored, logged, answered or fed back to the model."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("PLANTED_OPENAI_KEY", PLANTED)
    with FakeProvider(api_key=PLANTED) as fake:
        make_openai_configuration(
            "planted",
            fake,
            provider_kw={"api_key_env": "PLANTED_OPENAI_KEY"},
            allowed_tools=["notes.read"],
        )
        # 1. The provider's error body echoes the key.
        fake.queue({"status": 400, "message": f"Incorrect API key provided: {PLANTED}"})
        failed = submit(staff, "planted", "first")
        assert execute_run(failed.pk) == Run.Status.FAILED
        # 2. A tool result holds it, then the model repeats it.
        Note.objects.create(title="creds", body=f"OPENAI_API_KEY={PLANTED}", run=failed)
        read = {"id": "r1", "name": "notes_read", "arguments": {"title": "creds"}}
        fake.queue({"tool_calls": [read]}, {"text": f"The key is {PLANTED}."})
        done = submit(staff, "planted", "second")
        assert execute_run(done.pk) == Run.Status.COMPLETED
        sent_back = json.dumps(fake.requests[-1].body)

    assert PLANTED not in sent_back and "[REDACTED" in sent_back
    responses = [
        api.get(path).content.decode()
        for run in (failed, done)
        for path in (f"/api/runs/{run.pk}/", f"/api/runs/{run.pk}/events/")
    ]
    responses += [api.get("/api/runs/").content.decode(), api.get("/api/tickets/").content.decode()]
    assert [r for r in responses if PLANTED in r] == []
    # The note is the user's own data, the one place the test put the key.
    assert PLANTED not in text_columns(skip=(Note,))
    assert PLANTED not in caplog.text
