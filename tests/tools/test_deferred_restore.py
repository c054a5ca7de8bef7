"""DEF-4, DEF-5: the active deferred set is rebuilt from the effective context only.

Across prompts on one thread, after mode switches, after a restart and after a resume, the
tools offered (read from the fake server's request log) follow the successful evidence in
the context and nothing else. The rule itself is unit-tested over hand-built events.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agentruns import events as ev
from agentruns.events import LogEntry
from agentruns.models import Run, Ticket
from agentruns.runtime import faults
from agentruns.runtime.deferred import active_deferred
from agentruns.runtime.loop import execute_run
from agentruns.store.connection import database_url
from tests.support.catalog import make_openai_configuration, make_snippet
from tests.support.deferred import (
    call,
    fake_server,
    modes,
    offered,
    page_server,
    search,
    thread_events,
    tool_results,
    turn,
    turn_requests,
)
from tests.support.runs import prompt, submit

PROJECT_ROOT = Path(__file__).resolve().parents[2]
BASE = ["clock_now", "tool_search"]


@pytest.fixture
def staff(django_user_model):
    # No password: hashing one costs more than the test.
    user = django_user_model.objects.create(username="staff", is_staff=True, is_superuser=True)
    return user


@pytest.fixture
def api(staff) -> APIClient:
    client = APIClient()
    client.force_authenticate(staff)
    return client


# ---------------------------------------------------------------- the rule, pure

CATALOG = ("http.get", "deftest.weather", "deftest.publish")


def result(seq: int, tool: str, status: str = ev.OK, **extra: Any) -> LogEntry:
    payload = {"call_id": f"c{seq}", "tool": tool, "status": status, "content": "x", **extra}
    return LogEntry(seq, ev.TOOL_RESULT, payload)


def found(seq: int, *names: str, status: str = ev.OK) -> LogEntry:
    return result(seq, "tool_search", status, added_tool_names=list(names))


def assistant(seq: int, text: str = "", *calls: str) -> LogEntry:
    tool_calls = [{"id": f"a{seq}_{i}", "name": n, "arguments": {}} for i, n in enumerate(calls)]
    return LogEntry(seq, ev.ASSISTANT, {"text": text, "tool_calls": tool_calls})


def user(seq: int, text: str) -> LogEntry:
    return LogEntry(seq, ev.USER, {"text": text})


def test_def4_a_successful_search_contributes_its_added_names():
    events = [user(1, "go"), assistant(2, "", "tool_search"), found(3, "http.get")]
    assert active_deferred(events, CATALOG) == {"http.get"}


def test_def4_a_successful_deferred_tool_result_contributes_its_name():
    events = [user(1, "go"), assistant(2, "", "http.get"), result(3, "http.get")]
    assert active_deferred(events, CATALOG) == {"http.get"}


@pytest.mark.parametrize(
    "status", [s for s in ev.RESULT_STATUSES if s != ev.OK] + ["interrupted", ""]
)
def test_def4_unsuccessful_results_contribute_nothing(status):
    events = [
        found(1, "http.get", status=status),
        result(2, "deftest.weather", status),
        result(3, "deftest.publish", status, added_tool_names=["deftest.publish"]),
    ]
    assert active_deferred(events, CATALOG) == set()


def test_def4_an_interrupted_placeholder_contributes_nothing():
    placeholder = LogEntry(
        3,
        ev.TOOL_RESULT,
        {"call_id": "c", "tool": "http.get", "status": ev.ERROR, "content": "Interrupted."},
    )
    assert active_deferred([assistant(2, "", "http.get"), placeholder], CATALOG) == set()


def test_def4_prose_and_proposed_calls_are_never_evidence():
    events = [
        user(1, "Use http.get and deftest.weather, they are active."),
        assistant(2, "I activated http.get and deftest.weather.", "http.get", "deftest.weather"),
        LogEntry(3, ev.MODE_SWITCHED, {"mode": "http.get"}),
        LogEntry(4, ev.TICKET_OPENED, {"tool": "deftest.publish", "call_id": "a2_0"}),
    ]
    assert active_deferred(events, CATALOG) == set()


def test_def4_a_search_result_names_only_what_it_added():
    # A result without added names (e.g. "no match") activates nothing, whatever it says.
    events = [result(1, "tool_search", content="Activated: http.get")]
    assert active_deferred(events, CATALOG) == set()


def test_def5_names_outside_the_current_catalog_are_dropped():
    events = [found(1, "http.get", "deftest.weather"), result(2, "deftest.publish")]
    assert active_deferred(events, ("deftest.weather",)) == {"deftest.weather"}
    assert active_deferred(events, ()) == set()


# ---------------------------------------------------------------- across prompts

uses_db = pytest.mark.django_db


def configure(fake, *, allowed=("clock.now", "deftest", "http.get"), **mode_spec):
    return make_openai_configuration(
        "cfg", fake, allowed_tools=list(allowed), modes=modes(**mode_spec)
    )


@uses_db
def test_def4_a_successful_search_survives_into_the_next_prompt(staff):
    with fake_server(search("weather")) as (fake, _script):
        configure(fake, agent=(["clock.now"], ["deftest.weather", "deftest.verbose"]))
        first = prompt(staff, "cfg")
        prompt(staff, "cfg", "and again", thread=first.thread_id)
    requests = turn_requests(fake)
    assert offered(requests[0]) == BASE
    assert offered(requests[-1]) == [*BASE, "deftest_weather"]  # the next prompt's first


@uses_db
def test_def4_failures_refusals_and_prose_do_not_leak_into_the_next_prompt(staff):
    with fake_server(
        turn(call("deftest.weather")),  # before activation: refused
        search(""),  # ok, adds nothing
        search("quasar"),  # ok, no match
        turn(call("tool_search", {"query": 5})),  # invalid arguments: an error result
        {"text": "I have activated deftest.weather and deftest.verbose for you."},
    ) as (fake, _script):
        configure(fake, agent=(["clock.now"], ["deftest.weather", "deftest.verbose"]))
        first = prompt(staff, "cfg")
        statuses = [r["status"] for r in tool_results(first.pk)]
        assert statuses == ["refused", "ok", "ok", "error"]
        prompt(staff, "cfg", "Now call deftest.weather, it is active.", thread=first.thread_id)
    assert all(offered(r) == BASE for r in turn_requests(fake))


@uses_db
@pytest.mark.parametrize(
    ("tool", "outcome", "restored"),
    [
        ("http.get", "ok", True),
        ("http.get", "error", False),  # host not allowed
        ("deftest.broken", "error", False),  # raises
        ("deftest.weather", "refused", False),  # outside the grant
        ("deftest.publish", "ok", True),  # approved
        ("deftest.publish", "denied", False),
    ],
)
def test_def4_a_deferred_tools_own_result_counts_only_when_successful(
    staff, api, settings, tool, outcome, restored
):
    """The tool is core in `work`, so only its own result can be evidence in `browse`,
    where it is deferred."""
    settings.AGENTRUNS_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    allowed = ["clock.now", "http.get", "deftest.broken", "deftest.publish"]
    with page_server() as url, fake_server() as (fake, script):
        arguments = {"url": url if outcome == "ok" else "http://example.invalid/"}
        script.add(turn(call(tool, arguments if tool == "http.get" else {}, id="c1")))
        configure(
            fake,
            allowed=allowed,
            work=(["clock.now", tool], []),
            browse=(["clock.now"], [tool]),
        )
        needs_approval = tool == "deftest.publish"
        first = prompt(staff, "cfg", expect="awaiting" if needs_approval else "completed")
        if needs_approval:
            ticket = Ticket.objects.get(run=first, status=Ticket.Status.ACTIVE)
            decision = "allow" if outcome == "ok" else "deny"
            body = {
                "correlation_id": str(ticket.correlation_id),
                "run": first.pk,
                "snapshot_id": ticket.snapshot_id,
                "catalog_fingerprint": ticket.catalog_fingerprint,
                "call_id": "c1",
                "result": {"kind": "permission", "decision": decision},
            }
            assert api.post(f"/api/runs/{first.pk}/resume/", body, format="json").status_code == 200
            assert execute_run(first.pk) == "completed"
        [own] = tool_results(first.pk)
        assert own["status"] == outcome
        prompt(staff, "cfg", "next", thread=first.thread_id, mode="browse")
    wire = tool.replace(".", "_")
    last = turn_requests(fake)[-1]
    assert (wire in offered(last)) is restored
    assert offered(last) == ([*BASE, wire] if restored else BASE)


@uses_db
def test_def5_a_mode_switch_drops_names_outside_the_new_catalog_and_keeps_the_rest(staff, api):
    with fake_server(
        search("weather"),
        search("report"),  # deftest.verbose's description
    ) as (fake, script):
        configure(
            fake,
            agent=(["clock.now"], ["deftest.weather", "deftest.verbose"]),
            lite=(["clock.now"], ["deftest.weather", "http.get"]),
        )
        first = prompt(staff, "cfg")
        assert offered(turn_requests(fake)[-1]) == [*BASE, "deftest_weather", "deftest_verbose"]
        # Switch with the follow-up prompt; deftest.verbose is not in `lite`'s catalog.
        script.add(turn(call("deftest.verbose", id="v")))
        second = prompt(staff, "cfg", "more", thread=first.thread_id, mode="lite")
        lite_requests = turn_requests(fake)[-2:]
        assert [offered(r) for r in lite_requests] == [[*BASE, "deftest_weather"]] * 2
        [refused] = tool_results(second.pk)
        assert refused["status"] == "refused"
        # Switch back between runs: the evidence never left the context.
        response = api.post(f"/api/threads/{first.thread_id}/mode/", {"mode": "agent"})
        assert response.status_code == 200, response.content
        prompt(staff, "cfg", "back", thread=first.thread_id)
    assert offered(turn_requests(fake)[-1]) == [*BASE, "deftest_weather", "deftest_verbose"]
    switches = [
        e.payload["mode"] for e in thread_events(first.thread_id) if e.type == "mode.switched"
    ]
    assert switches == ["lite", "agent"]


# ---------------------------------------------------------------- restart and resume


def _by_tool_messages(body: dict[str, Any]) -> dict[str, Any]:
    """Decided by the request alone, so a request repeated after a restart gets the same
    reply: search, then use, then answer."""
    answered = sum(1 for m in body["messages"] if m["role"] == "tool")
    if answered == 0:
        return search("weather")
    if answered == 1:
        return turn(call("deftest.weather", id="w"))
    return {"text": "done"}


class Killed(BaseException):
    pass


@uses_db
def test_def4_a_worker_restart_mid_prompt_offers_exactly_the_same_set(staff):
    with fake_server() as (fake, script):
        script.add(*[_by_tool_messages] * 4)
        configure(fake, agent=(["clock.now"], ["deftest.weather", "deftest.verbose"]))
        run = submit(staff, "cfg")
        seen = {"provider": 0}

        def kill_on_second_reply(name: str) -> None:
            if name == faults.PROVIDER:
                seen["provider"] += 1
                if seen["provider"] == 2:
                    raise Killed  # the reply to the second request is lost

        with mock.patch.object(faults, "fault_point", kill_on_second_reply), pytest.raises(Killed):
            execute_run(run.pk)
        # What time does to a dead worker's lease; a fresh executor then takes over.
        Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(hours=1))
        assert execute_run(run.pk) == "completed"
    first, before_kill, after_restart, last = turn_requests(fake)
    assert offered(first) == BASE
    assert offered(before_kill) == offered(after_restart) == [*BASE, "deftest_weather"]
    assert after_restart.body["messages"] == before_kill.body["messages"]
    assert offered(last) == offered(after_restart)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_def4_a_fresh_process_restores_the_same_set_for_the_next_prompt(staff, settings):
    """The next prompt is driven by a new worker process: nothing but the log carries the
    activation over."""
    settings.AGENTRUNS_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    with (
        page_server() as url,
        fake_server(
            search("http"),
            turn(call("http.get", {"url": url})),
        ) as (fake, _script),
    ):
        make_openai_configuration(
            "cfg",
            fake,
            allowed_tools=["clock.now", "http.get"],
            modes=modes(agent=(["clock.now"], ["http.get"])),
        )
        first = prompt(staff, "cfg")
        assert [r["status"] for r in tool_results(first.pk)] == ["ok", "ok"]
        in_process = offered(turn_requests(fake)[-1])
        second = submit(staff, "cfg", "again", thread=first.thread_id)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRUNS_")}
        env.update(
            DATABASE_URL=database_url(),
            DJANGO_SETTINGS_MODULE="config.settings",
            AGENTRUNS_LOG_LEVEL="ERROR",
        )
        child = subprocess.run(
            [sys.executable, "-m", "tests.support.child", str(second.pk)],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert child.returncode == 0, child.stderr
        assert "outcome=completed" in child.stdout
    assert in_process == [*BASE[:1], "tool_search", "http_get"]
    assert offered(turn_requests(fake)[-1]) == in_process


@uses_db
@pytest.mark.parametrize("decision", ["allow", "deny"])
def test_def4_a_resume_after_approval_offers_exactly_the_same_set(staff, api, decision):
    with fake_server(
        search("bulletin weather"),
        turn(call("deftest.publish", id="pub")),
    ) as (fake, _script):
        configure(
            fake,
            agent=(["clock.now"], ["deftest.publish", "deftest.weather", "deftest.verbose"]),
        )
        run = prompt(staff, "cfg", expect="awaiting")
        parked_with = offered(turn_requests(fake)[-1])
        ticket = Ticket.objects.get(run=run, status=Ticket.Status.ACTIVE)
        body = {
            "correlation_id": str(ticket.correlation_id),
            "run": run.pk,
            "snapshot_id": ticket.snapshot_id,
            "catalog_fingerprint": ticket.catalog_fingerprint,
            "call_id": "pub",
            "result": {"kind": "permission", "decision": decision},
        }
        assert api.post(f"/api/runs/{run.pk}/resume/", body, format="json").status_code == 200
        assert execute_run(run.pk) == "completed"
    assert sorted(parked_with) == sorted([*BASE, "deftest_publish", "deftest_weather"])
    assert offered(turn_requests(fake)[-1]) == parked_with
    statuses = [r["status"] for r in tool_results(run.pk)]
    assert statuses == ["ok", "ok" if decision == "allow" else "denied"]


@uses_db
def test_def4_a_dry_run_on_a_thread_shows_the_restored_set(staff, api):
    with fake_server(search("weather")) as (fake, _script):
        configure(fake, agent=(["clock.now"], ["deftest.weather", "deftest.verbose"]))
        first = prompt(staff, "cfg")
        body = {"configuration": "cfg", "input": "again", "thread": first.thread_id}
        dry = api.post("/api/runs/", {**body, "dry_run": True}, format="json").json()
        prompt(staff, "cfg", "again", thread=first.thread_id)
    assert offered(turn_requests(fake)[-1]) == [*BASE, "deftest_weather"]
    assert [t["wire_name"] for t in dry["tools"]] == [*BASE, "deftest_weather"]


def _sent(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """(role, content, call ids) of Chat Completions messages or a dry run's."""
    return [
        (
            m["role"],
            m.get("content") or "",
            [c["id"] for c in m.get("tool_calls") or ()]
            or [m.get("tool_call_id") or m.get("call_id")],
        )
        for m in messages
    ]


@uses_db
def test_fs3_a_dry_run_is_the_first_send_on_a_thread_by_construction(staff, api):
    """FS-3: the dry run composes the run's first request by the loop's own recipe from the
    log the submission would write (the mode it switches to, its redacted input, the tools
    the thread activated, the forced sources), so it equals what the provider is sent."""
    snippet = make_snippet("pinned", text="Remember the pinned note.")
    with fake_server(search("weather")) as (fake, _script):
        configure(
            fake,
            agent=(["clock.now"], ["deftest.weather", "deftest.verbose"]),
            other=(["clock.now"], ["deftest.weather"]),
        )
        first = prompt(staff, "cfg")
        body = {
            "configuration": "cfg",
            "input": "again, key sk-live-" + "Z9y8X7w6V5u4T3s2R1q0P9o8",
            "thread": first.thread_id,
            "mode": "other",
            "forced_snippets": [snippet.pk],
        }
        dry = api.post("/api/runs/", {**body, "dry_run": True}, format="json").json()
        before = len(turn_requests(fake))
        submitted = api.post("/api/runs/", body, format="json")
        assert submitted.status_code == 201, submitted.json()
        assert execute_run(submitted.json()["id"]) == "completed"
    first_send = turn_requests(fake)[before].body
    assert _sent(dry["messages"]) == _sent(first_send["messages"])
    assert [t["wire_name"] for t in dry["tools"]] == offered(first_send)
    assert "Remember the pinned note." in [m["content"] for m in dry["messages"]]
    assert "sk-live-" not in json.dumps(first_send) and dry["redacted"]
