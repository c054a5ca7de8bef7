"""CG-11: API-key-, token- and password-shaped strings in any message are replaced by a
marker before a send; a redaction is an event on the run; the secret is stored nowhere."""

from __future__ import annotations

import json

import pytest
from django.apps import apps
from django.db import connection

from agentruns import events as ev
from agentruns.models import Event, Note, Run
from agentruns.runtime.loop import execute_run
from tests.support.catalog import make_openai_configuration, make_snippet
from tests.support.fake_provider import FakeProvider
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

OPENAI_KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
PASSWORD = "hunter2"
GITHUB_TOKEN = "ghp_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa"
LIVE_KEY = "sk-live-" + "9f8e7d6c5b4a3928171605f4"
SECRETS = (OPENAI_KEY, AWS_KEY, PASSWORD, GITHUB_TOKEN, LIVE_KEY)
INPUT = f"Deploy with {OPENAI_KEY} and {AWS_KEY}; password: {PASSWORD}. Then confirm."


@pytest.fixture
def fake():
    with FakeProvider(default={"text": "Confirmed."}) as server:
        yield server


def leaked(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def wire(fake: FakeProvider) -> str:
    return json.dumps([request.body for request in fake.requests])


def stored_rows(*, skip: tuple[type, ...] = ()) -> str:
    """Every row of every table this project and its queue own, as text."""
    texts: list[str] = []
    with connection.cursor() as cursor:
        for model in apps.get_models():
            if model._meta.app_label not in {"agentruns", "django_q"} or model in skip:
                continue
            cursor.execute(f'SELECT row_to_json(t)::text FROM "{model._meta.db_table}" t')
            texts.extend(row[0] for row in cursor.fetchall())
    return "\n".join(texts)


def redactions(run: Run) -> list[dict]:
    return [e.payload for e in Event.objects.filter(run=run, type=ev.SECRET_REDACTED)]


def test_secrets_in_the_input_never_reach_the_provider_or_the_database(api, fake):
    """CG-11: the key-, AWS- and password-shaped strings are replaced by markers in the
    stored input and `message.user`; a `secret.redacted` event says so without the secret;
    no request body, API response or table row holds one."""
    make_openai_configuration("plain", fake)
    response = api.post("/api/runs/", {"configuration": "plain", "input": INPUT}, format="json")
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])

    assert execute_run(run.pk) == Run.Status.COMPLETED

    run.refresh_from_db()
    assert leaked(run.input) == []
    assert "[REDACTED:api_key]" in run.input and "[REDACTED:password]" in run.input
    [user] = Event.objects.filter(run=run, type=ev.USER)
    assert user.payload["text"] == run.input
    [event] = redactions(run)
    assert event["where"] == "input"
    assert event["kinds"] == {"api_key": 2, "password": 1}

    assert len(fake.requests) == 1
    assert leaked(wire(fake)) == []
    assert "[REDACTED:api_key]" in wire(fake)
    assert leaked(response.content.decode()) == []
    assert leaked(api.get(f"/api/runs/{run.pk}/").content.decode()) == []
    assert leaked(api.get(f"/api/runs/{run.pk}/events/").content.decode()) == []
    assert leaked(stored_rows()) == []


def test_a_dry_run_shows_the_redacted_input_and_calls_nothing(api, fake):
    make_openai_configuration("plain", fake)
    response = api.post(
        "/api/runs/", {"configuration": "plain", "input": INPUT, "dry_run": True}, format="json"
    )
    assert response.status_code == 200, response.content
    assert leaked(response.content.decode()) == []
    assert "[REDACTED:api_key]" in response.json()["messages"][-1]["content"]
    assert fake.requests == []


def test_a_secret_in_a_snippet_is_redacted_on_the_wire(staff, fake):
    """CG-11: redaction runs on every send, system context included."""
    snippet = make_snippet("deploy", text=f"Deploy with token: {GITHUB_TOKEN} on main.")
    make_openai_configuration("with-snippet", fake, snippets=[snippet])
    run = submit(staff, "with-snippet", "Deploy it.")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    [request] = fake.requests
    system = [m["content"] for m in request.body["messages"] if m["role"] == "system"]
    assert any("Deploy with token: [REDACTED" in text for text in system)
    assert leaked(wire(fake)) == []


def test_a_secret_redacted_from_a_snippet_is_an_event_on_the_run(staff, fake):
    """CG-11: 'A redaction is an event on the run' — for the system context too."""
    snippet = make_snippet("deploy", text=f"Deploy with token: {GITHUB_TOKEN} on main.")
    make_openai_configuration("with-snippet", fake, snippets=[snippet])
    run = submit(staff, "with-snippet", "Deploy it.")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    events = redactions(run)
    assert events, "no secret.redacted event for the snippet's token"
    assert leaked(json.dumps(events)) == []


def test_a_secret_in_a_tool_result_is_redacted_in_the_log_and_on_the_wire(staff, fake):
    """CG-11: a tool's output is redacted before it is recorded, so the model, the log and
    the checkpoints only ever see the marker."""
    make_openai_configuration("reader", fake, allowed_tools=["notes.read"])
    read = {"id": "r1", "name": "notes_read", "arguments": {"title": "creds"}}
    fake.queue({"tool_calls": [read]}, {"text": "Read it."})
    run = submit(staff, "reader", "What do the creds say?")
    # The user's own note (SEC-10: a tool reads only what the run's initiator may see).
    Note.objects.create(title="creds", body=f"api_key={LIVE_KEY}\nrotate monthly", run=run)

    assert execute_run(run.pk) == Run.Status.COMPLETED

    [result] = Event.objects.filter(run=run, type=ev.TOOL_RESULT)
    assert result.payload["status"] == ev.OK
    assert "rotate monthly" in result.payload["content"]
    assert leaked(result.payload["content"]) == []
    assert "[REDACTED" in result.payload["content"]
    [event] = redactions(run)
    assert event["where"] == "tool:notes.read"
    assert leaked(json.dumps(event)) == []
    assert leaked(wire(fake)) == []
    # The note itself is the user's data; nothing the run wrote holds the secret.
    assert leaked(stored_rows(skip=(Note,))) == []


def test_a_secret_in_the_model_reply_is_redacted_before_it_is_stored(staff, fake):
    make_openai_configuration("plain", fake)
    fake.default = {"text": f"Your AWS key is {AWS_KEY}."}
    run = submit(staff, "plain", "What is my key?")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    run.refresh_from_db()
    assert run.final_reply == "Your AWS key is [REDACTED:api_key]."
    assert [e["where"] for e in redactions(run)] == ["model_reply"]
    assert leaked(stored_rows()) == []


def test_a_secret_in_tool_call_arguments_is_neither_stored_nor_sent_again(staff, fake):
    """CG-11: redaction covers *any* message of every send, and the secret is stored
    nowhere — the model's own tool-call arguments included."""
    make_openai_configuration("echoing", fake, allowed_tools=["test.echo"])
    call = {"id": "e", "name": "test_echo", "arguments": {"text": f"password: {PASSWORD}"}}
    fake.queue({"tool_calls": [call]}, {"text": "Done."})
    run = submit(staff, "echoing", "Echo something.")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    assert len(fake.requests) == 2
    assert leaked(json.dumps(fake.requests[1].body)) == []
    assert leaked(json.dumps([e.payload for e in Event.objects.filter(run=run)])) == []
