"""DEF-1 over HTTP (§11): modes on the configuration resource, choosing a mode with a
prompt, switching a thread's mode between runs, and a thread remembering its mode.

Which mode a run really used is read from the tools its provider requests offered.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agentruns.models import Configuration, Event, Run, Thread
from agentruns.runtime.loop import execute_run
from tests.support.catalog import make_openai_configuration, make_provider
from tests.support.deferred import call as tool_call
from tests.support.deferred import (
    fake_server,
    modes,
    offered,
    turn,
    turn_requests,
)

pytestmark = pytest.mark.django_db

AGENT = ["clock_now", "tool_search"]  # agent: core clock.now, http.get deferred
CHAT = ["notes_read"]  # chat: core notes.read, no catalog


@pytest.fixture
def staff(django_user_model):
    # No password: hashing one costs more than the test.
    return django_user_model.objects.create(username="staff", is_staff=True, is_superuser=True)


@pytest.fixture
def script():
    with fake_server() as (server, script):
        script.server = server
        yield script


@pytest.fixture
def fake(script):
    return script.server


def configure(fake, slug: str = "cfg", **kw):
    kw.setdefault("allowed_tools", ["clock.now", "notes", "http.get"])
    kw.setdefault(
        "modes",
        modes(agent=(["clock.now"], ["http.get"]), chat=(["notes.read"], [])),
    )
    return make_openai_configuration(slug, fake, **kw)


def post_run(api: APIClient, **body):
    body.setdefault("configuration", "cfg")
    body.setdefault("input", "go")
    return api.post("/api/runs/", body, format="json")


def run_prompt(api: APIClient, fake, expect: str = "completed", **body) -> dict:
    response = post_run(api, **body)
    assert response.status_code == 201, response.content
    run = response.json()
    assert execute_run(run["id"]) == expect
    return run


def switches(thread_id: int) -> list[str]:
    rows = Event.objects.filter(thread_id=thread_id, type="mode.switched").order_by("sequence")
    return [row.payload["mode"] for row in rows]


def last_offered(fake) -> list[str]:
    return offered(turn_requests(fake)[-1])


# ---------------------------------------------------------------- the configuration resource


def test_def1_modes_keep_their_order_through_the_api_and_the_first_is_the_default(api, fake):
    make_provider("fake", zone="local", kind="openai", base_url=fake.openai_base_url)
    spec = {
        "zeta": {"tools": ["notes.read"], "deferred": []},
        "alpha": {"tools": ["clock.now"], "deferred": ["http.get"]},
        "mid": {"tools": [], "deferred": []},
    }
    body = {
        "slug": "cfg",
        "name": "Cfg",
        "provider": "fake",
        "model": "gpt-test",
        "allowed_tools": ["clock.now", "notes", "http.get"],
        "modes": spec,
    }
    created = api.post("/api/configurations/", body, format="json")
    assert created.status_code == 201, created.content
    assert list(created.json()["modes"]) == ["zeta", "alpha", "mid"]
    assert api.get("/api/configurations/cfg/").json()["modes"] == spec
    stored = Configuration.objects.get(slug="cfg").modes
    assert [m["name"] for m in stored] == ["zeta", "alpha", "mid"]
    # Unnamed in the prompt, the first mode is the one used.
    run_prompt(api, fake)
    assert last_offered(fake) == ["notes_read"]
    # Reordering is a change like any other: now alpha leads.
    reordered = {"alpha": spec["alpha"], "mid": spec["mid"], "zeta": spec["zeta"]}
    patched = api.patch("/api/configurations/cfg/", {"modes": reordered}, format="json")
    assert patched.status_code == 200, patched.content
    assert list(api.get("/api/configurations/cfg/").json()["modes"]) == ["alpha", "mid", "zeta"]
    run_prompt(api, fake)
    assert last_offered(fake) == AGENT


def test_def1_empty_modes_read_back_empty_and_run_as_one_default_mode(api, fake):
    configure(fake, modes=[], allowed_tools=["clock.now", "http.get"])
    assert api.get("/api/configurations/cfg/").json()["modes"] == {}
    run = run_prompt(api, fake, mode="default")
    assert last_offered(fake) == AGENT
    assert switches(run["thread"]) == ["default"]


# ---------------------------------------------------------------- choosing a mode with a prompt


def test_def1_an_unknown_mode_is_a_400_naming_mode_and_creates_nothing(api, fake):
    configure(fake)
    response = post_run(api, mode="research")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    assert "mode" in body["fields"]
    assert "agent" in body["fields"]["mode"][0] and "chat" in body["fields"]["mode"][0]
    assert not Run.objects.exists() and not Thread.objects.exists()


def test_def1_an_unknown_mode_on_a_follow_up_is_a_400_and_the_thread_keeps_its_mode(api, fake):
    configure(fake)
    first = run_prompt(api, fake, mode="chat")
    response = post_run(api, thread=first["thread"], mode="nope")
    assert response.status_code == 400 and "mode" in response.json()["fields"]
    assert Run.objects.filter(thread_id=first["thread"]).count() == 1
    assert switches(first["thread"]) == ["chat"]


def test_def1_a_prompt_with_a_mode_records_the_switch_before_its_message(api, fake):
    configure(fake)
    run = run_prompt(api, fake, mode="chat")
    events = api.get(f"/api/runs/{run['id']}/events/").json()["events"]
    assert [e["type"] for e in events][:2] == ["mode.switched", "message.user"]
    assert events[0]["payload"] == {"mode": "chat"}
    assert last_offered(fake) == CHAT
    assert api.get(f"/api/threads/{run['thread']}/").json()["mode"] == "chat"


def test_def1_a_follow_up_prompt_remembers_its_threads_mode(api, fake):
    configure(fake)
    first = run_prompt(api, fake, mode="chat")
    thread = first["thread"]
    run_prompt(api, fake, thread=thread)
    assert last_offered(fake) == CHAT
    run_prompt(api, fake, thread=thread, mode="chat")  # the same mode: no new switch
    assert switches(thread) == ["chat"]
    run_prompt(api, fake, thread=thread, mode="agent")
    assert last_offered(fake) == AGENT
    run_prompt(api, fake, thread=thread)
    assert last_offered(fake) == AGENT
    assert switches(thread) == ["chat", "agent"]
    # A new thread starts in the default (first) mode, whatever other threads did.
    run_prompt(api, fake)
    assert last_offered(fake) == AGENT


# ---------------------------------------------------------------- switching between runs


def test_def1_switching_a_threads_mode_records_mode_switched_and_the_next_prompt_uses_it(api, fake):
    configure(fake)
    first = run_prompt(api, fake)
    thread = first["thread"]
    assert last_offered(fake) == AGENT
    response = api.post(f"/api/threads/{thread}/mode/", {"mode": "chat"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["mode"] == "chat"
    assert switches(thread) == ["chat"]
    switched = Event.objects.get(thread_id=thread, type="mode.switched")
    assert switched.run_id is None  # between runs: no run owns it
    assert switched.sequence > Event.objects.filter(run_id=first["id"]).latest("sequence").sequence
    # Asking again for the mode it is in changes nothing.
    assert api.post(f"/api/threads/{thread}/mode/", {"mode": "chat"}).status_code == 200
    assert switches(thread) == ["chat"]
    run_prompt(api, fake, thread=thread)
    assert last_offered(fake) == CHAT


def test_def1_switching_to_an_unknown_mode_is_a_400_naming_mode(api, fake):
    configure(fake)
    thread = run_prompt(api, fake)["thread"]
    response = api.post(f"/api/threads/{thread}/mode/", {"mode": "research"}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid" and "mode" in response.json()["fields"]
    missing = api.post(f"/api/threads/{thread}/mode/", {}, format="json")
    assert missing.status_code == 400 and "mode" in missing.json()["fields"]
    assert switches(thread) == []


def test_def1_switching_while_a_run_is_live_is_a_409(api, fake, script):
    configure(
        fake,
        modes=modes(agent=(["clock.now", "notes.write"], []), chat=(["notes.read"], [])),
    )
    script.add(turn(tool_call("notes.write", {"title": "t", "body": "b"})))
    run = post_run(api, input="write").json()
    thread = run["thread"]
    # Queued, not yet picked up.
    conflict = api.post(f"/api/threads/{thread}/mode/", {"mode": "chat"}, format="json")
    assert conflict.status_code == 409 and conflict.json()["code"] == "conflict"
    # Parked on approval.
    assert execute_run(run["id"]) == "awaiting"
    conflict = api.post(f"/api/threads/{thread}/mode/", {"mode": "chat"}, format="json")
    assert conflict.status_code == 409
    assert switches(thread) == []
    # Once the run has ended the switch goes through.
    assert api.post(f"/api/runs/{run['id']}/cancel/").status_code == 200
    assert api.post(f"/api/threads/{thread}/mode/", {"mode": "chat"}).status_code == 200
    assert switches(thread) == ["chat"]


def test_def1_a_thread_the_caller_cannot_see_is_a_404(api, fake, django_user_model):
    configure(fake)
    thread = run_prompt(api, fake)["thread"]
    other = APIClient()
    other.force_authenticate(django_user_model.objects.create(username="other"))
    assert other.post(f"/api/threads/{thread}/mode/", {"mode": "chat"}).status_code == 404
    assert other.post("/api/threads/999999/mode/", {"mode": "chat"}).status_code == 404
    assert switches(thread) == []


def test_def1_naming_the_mode_a_new_thread_is_already_in_is_not_a_switch(api, fake):
    configure(fake)
    thread = run_prompt(api, fake)["thread"]  # no mode named: the default, agent
    assert api.post(f"/api/threads/{thread}/mode/", {"mode": "agent"}).status_code == 200
    run_prompt(api, fake, thread=thread, mode="agent")
    assert switches(thread) == []


def test_def1_every_mode_the_configuration_api_accepts_can_be_chosen(api, fake):
    configure(fake)
    long = "m" * 80
    spec = {"chat": {"tools": ["notes.read"]}, long: {"tools": ["clock.now"]}}
    accepted = api.patch("/api/configurations/cfg/", {"modes": spec}, format="json")
    if accepted.status_code == 400:
        return  # refusing the name up front is a fine fix too
    response = post_run(api, mode=long)
    assert response.status_code == 201, response.content
