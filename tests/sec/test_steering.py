"""SEC-10: steering is narrower than seeing. Only a thread's initiator adds a prompt to it or
switches its mode, over the API and from the pages; holders of `view_all_runs` (and
approvers) see the thread and do not steer it. Tools that read application data read only
what the run's initiator may see: `notes.read` finds only notes of runs its initiator can
see (SEC-2)."""

from __future__ import annotations

import pytest

from agentruns import events as ev
from agentruns.models import Event, Note, Run
from agentruns.runtime.loop import execute_run
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.deferred import modes
from tests.support.hitl import client_for
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

READ = {"tool_calls": [{"name": "notes.read", "arguments": {"title": "plans"}}]}
MODES = modes(default=(["notes.read"], []), chat=(["notes.read"], []))
ONLOOKERS = ["view_all_runs", "approve_run"]


@pytest.fixture
def owner(django_user_model):
    return django_user_model.objects.create_user("owner")


@pytest.fixture
def config(db):
    return scripted_configuration("steer", [{"text": "done"}], modes=MODES)


@pytest.fixture
def ended(owner, config):
    """The owner's thread, its run finished: nothing in progress stands in the way."""
    run = submit(owner, "steer", "the owner's task")
    assert execute_run(run.pk) == Run.Status.COMPLETED
    return run


def onlooker(django_user_model, permission: str):
    user = django_user_model.objects.create_user(f"sees-{permission}", is_staff=True)
    return grant(user, permission, "use_playground")


def thread_log(thread_id: int) -> list[tuple[int, str]]:
    rows = Event.objects.filter(thread_id=thread_id).order_by("sequence")
    return list(rows.values_list("sequence", "type"))


@pytest.mark.parametrize("permission", ONLOOKERS)
def test_sec10_one_who_sees_a_thread_may_not_add_a_prompt_to_it(
    ended, django_user_model, permission
):
    viewer = onlooker(django_user_model, permission)
    client = client_for(viewer)
    assert client.get(f"/api/threads/{ended.thread_id}/").status_code == 200  # they see it
    before, runs = thread_log(ended.thread_id), Run.objects.count()

    body = {"configuration": "steer", "input": "injected", "thread": ended.thread_id}
    response = client.post("/api/runs/", body, format="json")

    assert response.status_code == 403, response.content
    assert response.json()["code"] == "not_permitted"
    assert thread_log(ended.thread_id) == before
    assert Run.objects.count() == runs


@pytest.mark.parametrize("permission", ONLOOKERS)
def test_sec10_one_who_sees_a_thread_may_not_switch_its_mode(ended, django_user_model, permission):
    client = client_for(onlooker(django_user_model, permission))
    before = thread_log(ended.thread_id)

    response = client.post(f"/api/threads/{ended.thread_id}/mode/", {"mode": "chat"})

    assert response.status_code == 403, response.content
    assert response.json()["code"] == "not_permitted"
    assert thread_log(ended.thread_id) == before


def test_sec10_the_initiator_steers_their_own_thread(owner, ended):
    client = client_for(owner)
    switched = client.post(f"/api/threads/{ended.thread_id}/mode/", {"mode": "chat"})
    assert switched.status_code == 200, switched.content
    body = {"configuration": "steer", "input": "next", "thread": ended.thread_id}
    response = client.post("/api/runs/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["thread"] == ended.thread_id
    types = [kind for _, kind in thread_log(ended.thread_id)]
    assert types[-2:] == [ev.MODE_SWITCHED, ev.USER]


@pytest.mark.parametrize("permission", ONLOOKERS)
@pytest.mark.parametrize("page", ["/runs/start/", "/playground/"])
def test_sec10_the_pages_never_steer_a_thread_one_only_sees(
    client, ended, django_user_model, permission, page
):
    """The pages start runs on new threads only: a posted `thread` or `mode` changes no
    existing thread, whoever posts it."""
    client.force_login(onlooker(django_user_model, permission))
    before = thread_log(ended.thread_id)
    form = {"configuration": "steer", "task": "injected", "thread": ended.thread_id}

    response = client.post(page, {**form, "mode": "chat"})

    assert response.status_code == 302, response.content
    new = Run.objects.exclude(pk=ended.pk).get()
    assert new.thread_id != ended.thread_id and new.created_by.username.startswith("sees-")
    assert thread_log(ended.thread_id) == before


def read_plans(user) -> str:
    """What `notes.read` returns to a run of `user` asking for the notes titled "plans"."""
    scripted_configuration("reader", [READ, {"text": "read"}], allowed_tools=["notes.read"])
    run = submit(user, "reader", "read the plans")
    assert execute_run(run.pk) == Run.Status.COMPLETED
    [result] = Event.objects.filter(run=run, type=ev.TOOL_RESULT)
    assert result.payload["status"] == ev.OK
    return result.payload["content"]


def test_sec10_notes_read_never_returns_another_users_note(owner, ended, django_user_model):
    Note.objects.create(title="plans", body="the owner's merger plans", run=ended)
    plain = django_user_model.objects.create_user("plain")
    mine = submit(plain, "steer", "my own run")
    Note.objects.create(title="plans", body="my own plans", run=mine)

    content = read_plans(plain)

    assert "my own plans" in content
    assert "merger" not in content


def test_sec10_notes_read_finds_what_its_initiator_may_see(owner, ended, django_user_model):
    """The rule is SEC-2's, applied to the run's initiator: one who may see every run reads
    every run's notes."""
    Note.objects.create(title="plans", body="the owner's merger plans", run=ended)
    Note.objects.create(title="plans", body="a note of no run")
    viewer = grant(django_user_model.objects.create_user("viewer"), "view_all_runs")

    content = read_plans(viewer)

    assert "merger" in content
    assert "no run" not in content
