"""DEF-2, DEF-3: what a prompt's provider requests offer, and what `tool_search` activates.

Every assertion reads the fake Chat Completions server's request log: the tool schemas and
system texts each request really carried.
"""

from __future__ import annotations

import json

import pytest

from agentruns.models import Ticket
from tests.conftest import grant
from tests.support.catalog import make_openai_configuration
from tests.support.deferred import (
    LEDGER_TOOLS,
    SCHEMA_MARKER,
    call,
    fake_server,
    modes,
    offered,
    search,
    system_of,
    tool_results,
    turn,
    turn_requests,
)
from tests.support.runs import prompt

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(django_user_model):
    # No password: hashing one costs more than the test. Dry runs need the playground (FS-5).
    return grant(
        django_user_model.objects.create(username="staff", is_staff=True), "use_playground"
    )


CATALOG_HEADER = "More tools exist; activate them with tool_search before use:"
CORE = ["clock.now"]


def catalog_text(request) -> str:
    [text] = [t for t in system_of(request) if t.startswith(CATALOG_HEADER)]
    return text


def catalog_entries(request) -> dict[str, str]:
    lines = catalog_text(request).splitlines()[1:]
    entries = {}
    for line in lines:
        assert line.startswith("- "), line
        name, _, description = line[2:].partition(": ")
        entries[name] = description
    return entries


def configure(fake, deferred, *, allowed=("clock.now", "deftest", "http.get"), **kw):
    return make_openai_configuration(
        "cfg",
        fake,
        allowed_tools=list(allowed),
        modes=modes(agent=(CORE, deferred)),
        **kw,
    )


# ---------------------------------------------------------------- DEF-2


def test_def2_first_request_offers_core_and_tool_search_and_a_one_line_catalog(staff):
    deferred = ["http.get", "deftest.verbose", "deftest.weather"]
    with fake_server() as (fake, _script):
        configure(fake, deferred, system_prompt="You are careful.")
        prompt(staff, "cfg")
    [first] = turn_requests(fake)
    assert offered(first) == ["clock_now", "tool_search"]
    # One catalog text, one line per deferred tool, in catalog order, no schemas.
    entries = catalog_entries(first)
    assert list(entries) == deferred
    assert all(0 < len(description) <= 120 for description in entries.values())
    assert entries["deftest.weather"] == "Forecast the weather for a city."
    assert entries["deftest.verbose"].endswith("…")
    assert entries["deftest.verbose"].startswith("Render a very detailed report")
    assert SCHEMA_MARKER not in json.dumps(first.body)
    assert "You are careful." in system_of(first)


def test_def2_a_mode_without_a_catalog_offers_no_tool_search_and_no_catalog(staff):
    with fake_server() as (fake, _script):
        configure(fake, [])
        prompt(staff, "cfg")
    [first] = turn_requests(fake)
    assert offered(first) == ["clock_now"]
    assert not [t for t in system_of(first) if t.startswith(CATALOG_HEADER)]


def test_def2_empty_modes_put_granted_deferred_tools_behind_tool_search(staff):
    with fake_server() as (fake, _script):
        make_openai_configuration("cfg", fake, allowed_tools=["clock.now", "http.get"])
        prompt(staff, "cfg")
    [first] = turn_requests(fake)
    assert offered(first) == ["clock_now", "tool_search"]
    assert list(catalog_entries(first)) == ["http.get"]


# ---------------------------------------------------------------- DEF-3: search then use


def test_def3_search_activates_from_the_next_turn_and_the_tool_then_works(staff):
    deferred = ["deftest.weather", "deftest.verbose"]
    with fake_server(
        search("weather"),
        turn(call("deftest.weather")),
    ) as (fake, _script):
        configure(fake, deferred)
        run = prompt(staff, "cfg")
    first, second, third = turn_requests(fake)
    assert offered(first) == ["clock_now", "tool_search"]
    assert offered(second) == ["clock_now", "tool_search", "deftest_weather"]
    assert offered(third) == offered(second)
    [weather] = [t for t in second.body["tools"] if t["function"]["name"] == "deftest_weather"]
    assert weather["function"]["parameters"]["type"] == "object"
    found, used = tool_results(run.pk)
    assert (found["tool"], found["status"]) == ("tool_search", "ok")
    assert found["added_tool_names"] == ["deftest.weather"]
    assert "deftest.weather" in found["content"]
    assert (used["tool"], used["status"]) == ("deftest.weather", "ok")
    assert run.final_reply == "done"


@pytest.mark.parametrize("query", ["deftest.weather", "deftest_weather"])
def test_def3_an_exact_name_ranks_that_tool_first(staff, query):
    # The exact match leads; keyword neighbours (here: the shared "deftest" prefix) may
    # fill the remaining places, never beyond four.
    with fake_server(search(query)) as (fake, _script):
        configure(fake, [*LEDGER_TOOLS, "deftest.weather"])
        run = prompt(staff, "cfg")
    [found] = tool_results(run.pk)
    added = found["added_tool_names"]
    assert added[0] == "deftest.weather" and len(added) <= 4
    assert "deftest_weather" in offered(turn_requests(fake)[1])


def test_def3_search_stays_within_the_current_modes_catalog(staff):
    # http.get is deferred and granted, but this mode's catalog does not list it.
    with fake_server(search("http.get")) as (fake, _script):
        configure(fake, ["deftest.weather"])
        run = prompt(staff, "cfg")
    [found] = tool_results(run.pk)
    assert found["status"] == "ok"
    assert found.get("added_tool_names", []) == []
    assert offered(turn_requests(fake)[1]) == ["clock_now", "tool_search"]


def test_def3_one_search_activates_at_most_four(staff):
    with fake_server(search("ledger"), search("ledger")) as (fake, _script):
        configure(fake, LEDGER_TOOLS)
        run = prompt(staff, "cfg")
    first_search, second_search = tool_results(run.pk)
    assert len(first_search["added_tool_names"]) == 4
    assert set(first_search["added_tool_names"]) < set(LEDGER_TOOLS)
    # The second search adds the rest: nothing is activated twice.
    rest = set(LEDGER_TOOLS) - set(first_search["added_tool_names"])
    assert set(second_search["added_tool_names"]) == rest
    _first, second, third = turn_requests(fake)
    wire = {name: name.replace(".", "_") for name in LEDGER_TOOLS}
    assert sorted(offered(second)[2:]) == sorted(wire[n] for n in first_search["added_tool_names"])
    assert sorted(offered(third)[2:]) == sorted(wire.values())


def test_def3_activation_grants_no_permission_a_tool_outside_the_grant_is_refused(staff):
    with fake_server(search("weather"), turn(call("deftest.weather"))) as (fake, _script):
        configure(fake, ["deftest.weather"], allowed=["clock.now"])
        run = prompt(staff, "cfg")
    found, used = tool_results(run.pk)
    assert found["added_tool_names"] == ["deftest.weather"]
    assert used["status"] == "refused"
    assert "not allowed" in used["content"]
    assert not used["content"].startswith("ok")


def test_def3_an_activated_write_tool_still_needs_approval(staff):
    with fake_server(search("bulletin"), turn(call("deftest.publish", id="pub"))) as (
        fake,
        _script,
    ):
        configure(fake, ["deftest.publish"])
        run = prompt(staff, "cfg", expect="awaiting")
    [found] = tool_results(run.pk)
    assert found["added_tool_names"] == ["deftest.publish"]
    ticket = Ticket.objects.get(run=run, status=Ticket.Status.ACTIVE)
    assert (ticket.kind, ticket.tool, ticket.call_id) == (
        "tool_permission",
        "deftest.publish",
        "pub",
    )


def test_def3_a_deferred_tool_called_before_activation_gets_a_visible_refusal(staff):
    with fake_server(turn(call("deftest.weather", id="early"))) as (fake, _script):
        configure(fake, ["deftest.weather"])
        run = prompt(staff, "cfg")
    [refused] = tool_results(run.pk)
    assert refused["status"] == "refused"
    assert "not available yet" in refused["content"]
    assert "tool_search" in refused["content"]
    first, second = turn_requests(fake)
    # The refusal reaches the model, and it activated nothing.
    [shown] = [m for m in second.body["messages"] if m["role"] == "tool"]
    assert shown["tool_call_id"] == "early" and "not available yet" in shown["content"]
    assert offered(second) == offered(first) == ["clock_now", "tool_search"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("", "1 to 200 characters"),
        ("   ", "1 to 200 characters"),
        ("weather " * 62 + "city", "1 to 200 characters"),  # 500 characters
        ("quasar nebula", "No deferred tool matches"),
    ],
    ids=["empty", "blank", "500-chars", "no-match"],
)
def test_def3_a_search_that_finds_nothing_is_ok_adds_nothing_and_says_why(staff, query, message):
    with fake_server(search(query)) as (fake, _script):
        configure(fake, ["deftest.weather", "http.get"])
        run = prompt(staff, "cfg")
    [found] = tool_results(run.pk)
    assert found["status"] == "ok"
    assert found.get("added_tool_names", []) == []
    assert message in found["content"]
    assert offered(turn_requests(fake)[1]) == ["clock_now", "tool_search"]


def test_def3_a_tool_searched_for_in_the_same_turn_is_not_yet_callable(staff):
    both = turn(call("tool_search", {"query": "weather"}), call("deftest.weather", id="same"))
    with fake_server(both, turn(call("deftest.weather", id="next"))) as (fake, _script):
        configure(fake, ["deftest.weather"])
        run = prompt(staff, "cfg")
    # The refusal is logged with the turn, before the search ran; the model reads the
    # results in call order either way.
    by_call = {r["call_id"]: r for r in tool_results(run.pk)}
    [found] = [r for r in by_call.values() if r["tool"] == "tool_search"]
    assert found["added_tool_names"] == ["deftest.weather"]
    assert by_call["same"]["status"] == "refused"
    assert "not available yet" in by_call["same"]["content"]
    assert by_call["next"]["status"] == "ok"
    second = turn_requests(fake)[1]
    assert [m["tool_call_id"] for m in second.body["messages"] if m["role"] == "tool"] == [
        found["call_id"],
        "same",
    ]


def test_def2_a_dry_run_shows_the_catalog_the_first_request_carries(staff, api):
    with fake_server() as (fake, _script):
        configure(fake, ["deftest.weather", "http.get"], system_prompt="You are careful.")
        dry = api.post(
            "/api/runs/", {"configuration": "cfg", "input": "go", "dry_run": True}, format="json"
        ).json()
        prompt(staff, "cfg")
    [first] = turn_requests(fake)
    assert [t["wire_name"] for t in dry["tools"]] == offered(first)
    dry_system = [m["content"] for m in dry["messages"] if m["role"] == "system"]
    assert dry_system == system_of(first)
