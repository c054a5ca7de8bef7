"""The runs API (§11): CLU-4 (the wake-up commits with the submission), CLU-5 (idempotent
submissions), FS-3 (dry runs), LOOP-1 (one live run per thread, database-enforced), events
after a sequence, notes, and the run's read model."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django_q.models import OrmQ
from rest_framework.test import APIClient

from agentruns import events as ev
from agentruns.models import Event, Note, Run, Thread
from agentruns.runtime.loop import execute_run
from agentruns.services.runs import Submission, run_submit
from agentruns.store import wakeups
from tests.support.catalog import make_configuration, make_openai_configuration, make_snippet
from tests.support.fake_provider import FakeProvider

pytestmark = pytest.mark.django_db

NOTE_TURNS = {
    "turns": [
        {"tool_calls": [{"name": "notes.write", "arguments": {"title": "api", "body": "hello"}}]},
        {"text": "Saved."},
    ]
}


@pytest.fixture
def notes_config():
    return make_configuration(
        "notes",
        model="scripted-model",
        allowed_tools=["notes"],
        approval_exempt_tools=["notes.write"],
        script=NOTE_TURNS,
    )


def post(api: APIClient, body: dict, **headers):
    return api.post("/api/runs/", body, format="json", **headers)


def wake_tasks() -> list[tuple[str, tuple]]:
    return [(q.task["func"], tuple(q.task["args"])) for q in OrmQ.objects.all()]


# --- CLU-4 -----------------------------------------------------------------------------


def test_a_submission_creates_the_run_and_its_wake_up_together(api, notes_config):
    response = post(api, {"configuration": "notes", "input": "write it"})

    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert run.status == Run.Status.QUEUED
    assert wake_tasks() == [(wakeups.WAKE_TASK, (run.pk,))]
    assert OrmQ.objects.filter(pk=run.wake_queue_id).exists()
    assert list(Event.objects.filter(run=run).values_list("type", flat=True)) == [ev.USER]


def test_a_rolled_back_submission_leaves_no_run_and_no_wake_up(staff, notes_config):
    """CLU-4: the wake-up is enqueued in the submission's transaction, so it vanishes with
    it and never wakes anyone."""

    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        run_submit(user=staff, submission=Submission(configuration="notes", input="x"))
        assert OrmQ.objects.count() == 1
        raise Abort

    assert not Run.objects.exists()
    assert not Thread.objects.exists()
    assert not OrmQ.objects.exists()


def test_a_failed_enqueue_leaves_no_run_without_its_wake_up(staff, notes_config, monkeypatch):
    """CLU-4: a committed run is never left without its wake-up."""

    def broken(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(wakeups, "async_task", broken)
    with pytest.raises(ConnectionError):
        run_submit(user=staff, submission=Submission(configuration="notes", input="x"))

    assert not Run.objects.exists()
    assert not Event.objects.exists()


# --- CLU-5 -----------------------------------------------------------------------------


def test_the_same_idempotency_key_and_body_returns_the_original_run(api, notes_config):
    body = {"configuration": "notes", "input": "once"}
    first = post(api, body, HTTP_IDEMPOTENCY_KEY="k-1")
    again = post(api, body, HTTP_IDEMPOTENCY_KEY="k-1")

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert Run.objects.count() == 1
    assert OrmQ.objects.count() == 1


def test_the_same_idempotency_key_with_another_body_is_a_409(api, notes_config):
    assert (
        post(api, {"configuration": "notes", "input": "a"}, HTTP_IDEMPOTENCY_KEY="k").status_code
        == 201
    )
    response = post(api, {"configuration": "notes", "input": "b"}, HTTP_IDEMPOTENCY_KEY="k")

    assert response.status_code == 409
    assert response.json()["code"] == "conflict"
    assert Run.objects.count() == 1


def test_an_idempotency_key_belongs_to_its_caller(api, member, notes_config):
    body = {"configuration": "notes", "input": "same"}
    mine = post(api, body, HTTP_IDEMPOTENCY_KEY="shared")
    other = APIClient()
    other.force_authenticate(member)
    theirs = post(other, body, HTTP_IDEMPOTENCY_KEY="shared")

    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert mine.json()["id"] != theirs.json()["id"]


def test_without_a_key_every_submission_is_a_new_run(api, notes_config):
    body = {"configuration": "notes", "input": "again"}
    ids = {post(api, body).json()["id"] for _ in range(2)}
    assert len(ids) == 2


# --- FS-3 ------------------------------------------------------------------------------


def test_a_dry_run_returns_the_messages_and_readout_and_creates_nothing(api):
    with FakeProvider(default={"text": "must never be asked"}) as fake:
        snippet = make_snippet("style", data_class="internal", text="Answer in haiku.")
        make_openai_configuration("dry", fake, system_prompt="You are careful.", snippets=[snippet])
        response = post(api, {"configuration": "dry", "input": "Plan it.", "dry_run": True})
        assert fake.requests == []

    assert response.status_code == 200, response.content
    data = response.json()
    assert data["messages"] == [
        {"role": "system", "content": "You are careful."},
        {"role": "system", "content": "Answer in haiku."},
        {"role": "user", "content": "Plan it."},
    ]
    readout = data["readout"]
    assert [s["name"] for s in readout["sources"]] == ["dry", "style"]
    assert not Run.objects.exists()
    assert not Thread.objects.exists()
    assert not OrmQ.objects.exists()


# --- LOOP-1 ----------------------------------------------------------------------------


def test_a_thread_has_at_most_one_live_run(api, notes_config):
    first = post(api, {"configuration": "notes", "input": "one"}).json()
    body = {"configuration": "notes", "input": "two", "thread": first["thread"]}

    second = post(api, body)

    assert second.status_code == 409
    assert second.json()["code"] == "conflict"
    assert Run.objects.count() == 1
    assert OrmQ.objects.count() == 1

    # Database-enforced, not just checked by the service.
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.create(thread_id=first["thread"], configuration=notes_config, input="sneaky")

    # Once the first run ended, the thread takes the next prompt.
    assert execute_run(first["id"]) == Run.Status.COMPLETED
    third = post(api, body)
    assert third.status_code == 201
    assert third.json()["thread"] == first["thread"]


# --- reading runs, events and notes ----------------------------------------------------


def completed_run(api) -> dict:
    created = post(api, {"configuration": "notes", "input": "write it"}).json()
    assert execute_run(created["id"]) == Run.Status.COMPLETED
    return created


def test_events_after_a_sequence_are_the_later_ones_in_order(api, notes_config):
    run = completed_run(api)
    everything = api.get(f"/api/runs/{run['id']}/events/").json()["events"]
    sequences = [e["sequence"] for e in everything]
    assert sequences == sorted(sequences)
    assert [e["type"] for e in everything] == [
        ev.USER,
        ev.ASSISTANT,
        ev.TOOL_RESULT,
        ev.ASSISTANT,
        ev.RUN_COMPLETED,
    ]
    assert set(everything[0]) == {"sequence", "type", "payload", "created_at"}

    later = api.get(f"/api/runs/{run['id']}/events/?after={sequences[1]}").json()["events"]

    assert later == everything[2:]
    last = api.get(f"/api/runs/{run['id']}/events/?after={sequences[-1]}").json()["events"]
    assert last == []


def test_events_after_must_be_an_integer(api, notes_config):
    run = post(api, {"configuration": "notes", "input": "x"}).json()
    response = api.get(f"/api/runs/{run['id']}/events/?after=yesterday")
    assert response.status_code == 400


def test_notes_lists_the_note_a_completed_run_wrote(api, member, notes_config):
    run = completed_run(api)
    [note] = Note.objects.all()

    listed = api.get("/api/notes/").json()["results"]

    assert listed == [
        {
            "id": note.pk,
            "title": "api",
            "body": "hello",
            "run": run["id"],
            "call_id": note.call_id,
            "created_at": listed[0]["created_at"],
        }
    ]
    assert note.call_id
    outsider = APIClient()
    outsider.force_authenticate(member)
    assert outsider.get("/api/notes/").json()["results"] == []


def test_a_run_reads_back_with_readout_counters_and_no_ticket_or_failure(api, notes_config):
    run = completed_run(api)

    data = api.get(f"/api/runs/{run['id']}/").json()

    assert {
        "id",
        "thread",
        "status",
        "configuration",
        "input",
        "final_reply",
        "failure",
        "ticket",
        "readout",
        "created_by",
        "created_at",
        "counters",
    } <= set(data)
    assert (data["status"], data["final_reply"]) == ("completed", "Saved.")
    assert data["ticket"] is None
    assert data["failure"] is None
    assert data["configuration"] == "notes"
    assert data["created_by"] == "staff"
    # The configuration declares nothing; the final reply read the note tool's result and
    # carries its class (CG-12), so it is the one source listed.
    (reply,) = data["readout"]["sources"]
    assert (reply["kind"], reply["name"], reply["origin"]["kind"]) == (
        "reply",
        "turn 2",
        "tool_result",
    )
    counters = data["counters"]
    assert counters["model_turns"] == 2
    assert counters["tool_results"] == 1
    assert counters["tool_calls_used"] == 1
    assert counters["events"] == 5


def test_cancelling_a_queued_run_ends_it_and_a_second_cancel_is_a_409(api, notes_config):
    run = post(api, {"configuration": "notes", "input": "x"}).json()

    cancelled = api.post(f"/api/runs/{run['id']}/cancel/")

    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert Event.objects.filter(run_id=run["id"], type=ev.RUN_CANCELLED).count() == 1
    assert api.post(f"/api/runs/{run['id']}/cancel/").status_code == 409
    assert execute_run(run["id"]) is None  # its wake-up finds nothing to do
