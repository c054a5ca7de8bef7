"""SEC-3, SEC-2, LOOP-7: bad input — from a host over the API or from the model — gets a
clear 4xx or a model-visible error result; never a 500, never a lost or half-written run,
never a provider 400."""

from __future__ import annotations

import json
import time

import pytest
from django_q.models import OrmQ
from rest_framework.test import APIClient

from agentruns import events as ev
from agentruns.models import Event, Note, Run, ToolInvocation
from agentruns.runtime.loop import execute_run
from tests.conftest import grant
from tests.support.catalog import (
    make_configuration,
    make_openai_configuration,
    make_skill,
    make_snippet,
)
from tests.support.crash import provider_pairing_problems
from tests.support.fake_provider import FakeProvider
from tests.support.runs import submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake():
    with FakeProvider() as server:
        yield server


@pytest.fixture
def scripted():
    return make_configuration("scripted", model="m", script={"turns": [{"text": "ok"}]})


def post(api: APIClient, body, **kw):
    return api.post("/api/runs/", body, format="json", **kw)


def assert_nothing_written() -> None:
    """SEC-3: a refused submission leaves no run, no event and no wake-up behind."""
    assert not Run.objects.exists()
    assert not Event.objects.exists()
    assert not OrmQ.objects.exists()


# --- the API ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param({"configuration": "nope", "input": "hi"}, "configuration", id="unknown"),
        pytest.param({"input": "hi"}, "configuration", id="missing-configuration"),
        pytest.param({"configuration": "scripted", "input": "  "}, "input", id="blank-input"),
        pytest.param(
            {"configuration": "scripted", "input": "hi", "forced_snippets": [999999]},
            "forced_snippets",
            id="unknown-snippet",
        ),
        pytest.param(
            {"configuration": "scripted", "input": "hi", "forced_skills": [999999]},
            "forced_skills",
            id="unknown-skill",
        ),
        pytest.param(
            {"configuration": "scripted", "input": "hi", "thread": 999999},
            "thread",
            id="unknown-thread",
        ),
        pytest.param(
            {"configuration": "scripted", "input": "hi", "mode": "no-such-mode"},
            "mode",
            id="unknown-mode",
        ),
    ],
)
def test_a_submission_naming_something_unknown_is_a_400_naming_the_field(
    api, scripted, body, field
):
    response = post(api, body)

    assert response.status_code == 400, response.content
    data = response.json()
    assert data["code"] == "invalid"
    assert field in data["fields"]
    assert_nothing_written()


def test_known_snippet_and_skill_ids_are_accepted_but_unknown_ones_are_listed(api, scripted):
    snippet, skill = make_snippet("known"), make_skill("known")
    response = post(
        api,
        {
            "configuration": "scripted",
            "input": "hi",
            "forced_snippets": [snippet.pk, 424242],
            "forced_skills": [skill.pk],
        },
    )
    assert response.status_code == 400
    assert "424242" in json.dumps(response.json()["fields"]["forced_snippets"])
    assert "forced_skills" not in response.json()["fields"]


def test_an_inactive_configuration_is_refused(api):
    make_configuration("off", model="m", active=False)
    response = post(api, {"configuration": "off", "input": "hi"})

    assert response.status_code == 400
    assert "inactive" in json.dumps(response.json()["fields"]["configuration"])
    assert_nothing_written()


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param('{"configuration": "scripted", "input": ', id="truncated"),
        pytest.param("{'configuration': 'scripted'}", id="single-quotes"),
        pytest.param("\xff\xfe garbage", id="not-utf8"),
    ],
)
def test_malformed_json_is_a_400(api, scripted, raw):
    response = api.post("/api/runs/", raw, content_type="application/json")

    assert response.status_code == 400, response.content
    assert response.json()["code"] == "malformed"
    assert_nothing_written()


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        pytest.param(["configuration", "scripted"], {"non_field_errors"}, id="array-body"),
        pytest.param(
            {"configuration": "scripted", "input": ["a", "list"]}, {"input"}, id="input-list"
        ),
        pytest.param(
            {"configuration": {"slug": "scripted"}, "input": "hi"},
            {"configuration"},
            id="configuration-object",
        ),
        pytest.param(
            {"configuration": "scripted", "input": "hi", "forced_snippets": "1,2"},
            {"forced_snippets"},
            id="ids-string",
        ),
        pytest.param(
            {"configuration": "scripted", "input": "hi", "forced_skills": [1, "x"]},
            {"forced_skills"},
            id="id-not-int",
        ),
        pytest.param(
            {"configuration": "scripted", "input": "hi", "thread": "first"},
            {"thread"},
            id="thread-string",
        ),
        pytest.param(
            {"configuration": "scripted", "input": "hi", "dry_run": "perhaps"},
            {"dry_run"},
            id="dry-run-not-bool",
        ),
    ],
)
def test_wrong_types_are_400_field_errors(api, scripted, body, fields):
    response = post(api, body)

    assert response.status_code == 400, response.content
    data = response.json()
    assert data["code"] == "invalid"
    assert set(data["fields"]) == fields
    assert_nothing_written()


def test_a_huge_body_is_a_413_not_a_500(api, scripted, settings):
    body = {"configuration": "scripted", "input": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)}
    response = post(api, body)

    assert response.status_code == 413, response.status_code
    assert response.json()["code"] == "payload_too_large"
    assert_nothing_written()


def test_an_input_over_the_length_limit_is_a_400(api, scripted, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000_000
    response = post(api, {"configuration": "scripted", "input": "x" * 100_001})

    assert response.status_code == 400
    assert "input" in response.json()["fields"]
    assert_nothing_written()


@pytest.mark.parametrize("suffix", ["", "events/"])
def test_an_unknown_run_is_a_404(api, suffix):
    response = api.get(f"/api/runs/987654/{suffix}")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_cancelling_an_unknown_run_is_a_404(api):
    assert api.post("/api/runs/987654/cancel/").status_code == 404


def test_another_users_run_is_a_404_unless_they_may_view_all_runs(member, staff, scripted):
    """SEC-2: a run is not even acknowledged to someone who may not see it."""
    run = submit(staff, "scripted", "mine")
    client = APIClient()
    client.force_authenticate(member)

    for path in (f"/api/runs/{run.pk}/", f"/api/runs/{run.pk}/events/"):
        assert client.get(path).status_code == 404
    assert client.post(f"/api/runs/{run.pk}/cancel/").status_code == 404
    assert [r["id"] for r in client.get("/api/runs/").json()["results"]] == []

    grant(member, "view_all_runs")
    assert client.get(f"/api/runs/{run.pk}/").status_code == 200
    assert client.get(f"/api/runs/{run.pk}/events/").status_code == 200
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED  # nothing the outsider did changed it


def test_an_anonymous_caller_is_refused(scripted):
    response = APIClient().post(
        "/api/runs/", {"configuration": "scripted", "input": "hi"}, format="json"
    )
    assert response.status_code in (401, 403)
    assert_nothing_written()


# --- the model -------------------------------------------------------------------------


def echo_configuration(fake: FakeProvider) -> None:
    make_openai_configuration(
        "loop",
        fake,
        allowed_tools=["test.echo", "notes.write"],
        approval_exempt_tools=["notes.write"],
    )


def only_result(run: Run) -> dict:
    [result] = Event.objects.filter(run=run, type=ev.TOOL_RESULT)
    return result.payload


def answered(fake: FakeProvider, request: int = 1) -> list[dict]:
    return [m for m in fake.requests[request].body["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param('{"text": "unterminated', id="truncated-json"),
        pytest.param("[1, 2]", id="json-array"),
        pytest.param("not json at all", id="prose"),
    ],
)
def test_arguments_that_are_not_a_json_object_are_an_error_the_model_sees(staff, fake, arguments):
    """SEC-3, LOOP-7: a model-visible `error` result; the run continues and the next
    request (a valid history: the raw arguments are replayed) gets the answer."""
    echo_configuration(fake)
    call = {"id": "bad", "name": "test_echo", "arguments": arguments}
    fake.queue({"tool_calls": [call]}, {"text": "sorry"})
    run = submit(staff, "loop")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    result = only_result(run)
    assert (result["call_id"], result["status"]) == ("bad", ev.ERROR)
    assert "JSON object" in result["content"]
    [tool_message] = answered(fake)
    assert tool_message["content"] == result["content"]
    assert not ToolInvocation.objects.filter(run=run).exists()
    assert provider_pairing_problems(run.pk) == []


def test_an_unknown_tool_is_refused_and_the_run_continues(staff, fake):
    echo_configuration(fake)
    fake.queue({"tool_calls": [{"id": "u", "name": "rm_rf", "arguments": {}}]}, {"text": "ok then"})
    run = submit(staff, "loop")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    result = only_result(run)
    assert result["status"] == ev.REFUSED
    assert "Unknown tool" in result["content"]
    assert answered(fake)[0]["content"] == result["content"]


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        pytest.param("test_echo", {"text": 5}, id="wrong-type"),
        pytest.param("notes_write", {"title": "t"}, id="missing-required"),
        pytest.param("notes_write", {"title": "t", "body": "b", "extra": 1}, id="extra-field"),
        pytest.param("notes_write", {"title": "", "body": "b"}, id="too-short"),
    ],
)
def test_schema_violating_arguments_are_an_error_and_never_run_the_tool(
    staff, fake, name, arguments
):
    echo_configuration(fake)
    fake.queue({"tool_calls": [{"id": "s", "name": name, "arguments": arguments}]}, {"text": "ok"})
    run = submit(staff, "loop")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    result = only_result(run)
    assert result["status"] == ev.ERROR
    assert result["content"].startswith("Error: invalid arguments")
    assert answered(fake)[0]["content"] == result["content"]
    assert not Note.objects.exists()
    assert not ToolInvocation.objects.filter(run=run).exists()


def test_a_reply_without_choices_fails_the_run_as_malformed(staff, fake):
    echo_configuration(fake)
    fake.queue({"choices": []})
    run = submit(staff, "loop")

    assert execute_run(run.pk) == Run.Status.FAILED

    run.refresh_from_db()
    assert run.failure["code"] == "provider_malformed_reply"
    assert Event.objects.filter(run=run, type=ev.RUN_FAILED).count() == 1
    assert not Event.objects.filter(run=run, type=ev.ASSISTANT).exists()


def test_a_provider_that_hangs_is_cut_off_by_its_timeout(staff, fake):
    """SEC-3: a hanging provider fails the run `provider_error` within a bounded time (its
    `timeout_seconds`, no SDK retries), never a run stuck `running`."""
    make_openai_configuration("slow", fake, provider_kw={"timeout_seconds": 0.5})
    fake.default = {"text": "too late", "delay": 30}
    run = submit(staff, "slow")

    started = time.monotonic()
    assert execute_run(run.pk) == Run.Status.FAILED
    assert time.monotonic() - started < 5

    run.refresh_from_db()
    assert run.failure["code"] == "provider_error"
    assert run.failure["retryable"] is True
    assert len(fake.requests) == 1


def test_a_corrupt_history_fails_the_run_before_anything_is_sent(staff, fake):
    """LOOP-7: an orphan `tool.result` in the log is refused by the pairing check before the
    send — a failed run with `corrupt_history`, never a provider 400."""
    echo_configuration(fake)
    fake.default = {"text": "must never be asked"}
    run = submit(staff, "loop")
    last = Event.objects.filter(thread_id=run.thread_id).order_by("-sequence")[0]
    Event.objects.create(
        thread_id=run.thread_id,
        run=run,
        sequence=last.sequence + 1,
        type=ev.TOOL_RESULT,
        payload={"call_id": "ghost", "tool": "test.echo", "status": "ok", "content": "boo"},
    )

    assert execute_run(run.pk) == Run.Status.FAILED

    run.refresh_from_db()
    assert run.failure["code"] == "corrupt_history"
    assert "ghost" in run.failure["detail"]
    assert fake.requests == []


def test_duplicate_call_ids_from_the_model_never_become_a_provider_400(staff, fake):
    """LOOP-7: a turn reusing one call id twice cannot be paired; the runtime must never
    send such a history (the real APIs answer 400) — it fails `corrupt_history` or keeps
    the pairing valid by construction."""
    echo_configuration(fake)
    twice = [
        {"id": "dup", "name": "test_echo", "arguments": {"text": "one"}},
        {"id": "dup", "name": "test_echo", "arguments": {"text": "two"}},
    ]
    fake.queue({"tool_calls": twice}, {"text": "done"})
    run = submit(staff, "loop")

    outcome = execute_run(run.pk)

    run.refresh_from_db()
    assert outcome in (Run.Status.COMPLETED, Run.Status.FAILED)
    if outcome == Run.Status.FAILED:
        assert run.failure["code"] == "corrupt_history", run.failure
        assert len(fake.requests) == 1
    else:
        assert provider_pairing_problems(run.pk) == []


def test_duplicate_call_ids_leave_no_invocation_half_written(staff, fake):
    """TOOL-3, SEC-3: every invocation row is authorised before its call and completed
    after it; after the run ended none is left open, and no result is recorded twice for
    one row."""
    echo_configuration(fake)
    twice = [
        {"id": "dup", "name": "test_echo", "arguments": {"text": "one"}},
        {"id": "dup", "name": "test_echo", "arguments": {"text": "two"}},
    ]
    fake.queue({"tool_calls": twice}, {"text": "done"})
    run = submit(staff, "loop")

    execute_run(run.pk)

    run.refresh_from_db()
    assert run.status in Run.TERMINAL
    open_rows = ToolInvocation.objects.filter(
        run=run,
        status__in=[ToolInvocation.Status.AUTHORISED, ToolInvocation.Status.EXECUTING],
    )
    assert list(open_rows.values_list("call_id", "arguments")) == []


def test_a_submission_onto_another_users_thread_is_refused(member, staff, scripted):
    """SEC-2: a thread is addressed only by someone who can see a run in it."""
    run = submit(staff, "scripted", "mine")
    execute_run(run.pk)
    client = APIClient()
    client.force_authenticate(member)

    response = post(client, {"configuration": "scripted", "input": "hi", "thread": run.thread_id})

    assert response.status_code == 400
    assert "thread" in response.json()["fields"]
    assert Run.objects.count() == 1
