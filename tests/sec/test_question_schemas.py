"""SEC-7, HITL-6: an `ask_user` schema is accepted only from SEC-7's closed keyword set,
bounded in size and depth, with no references and no `patternProperties`; anything else
is a model-visible error result and never a ticket, and checking an answer takes bounded
time. Each attack of issue 15 (item 1) is shown end to end through the fake provider: a
schema that would freeze the web process, make every answer a 500, or crash-loop the run
never becomes a ticket, and the run carries on. Valid schemas (nested objects, arrays,
`const`, exclusive bounds) still make a ticket, an inbox form and an answered run."""

from __future__ import annotations

import re
import time
from html import unescape

import pytest
from django.test import Client

from agentruns import events as ev
from agentruns.answers import MAX_NESTING, answer_errors, schema_problems
from agentruns.models import Event, Run, Ticket
from agentruns.runtime.loop import execute_run
from tests.support.catalog import KEY, KEY_ENV, openai_configuration
from tests.support.fake_provider import FakeProvider
from tests.support.hitl import (
    active_ticket,
    answer,
    client_for,
    identity,
    results_by_call,
    resume,
    tool_messages,
)
from tests.support.runs import submit

NAMED = {"type": "object", "properties": {"v": {"type": "string"}}}


def with_top(**keywords) -> dict:
    return {**NAMED, **keywords}


def nested_all_of(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"allOf": [schema]}
    return schema


def nested_objects(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"v": schema}}
    return schema


REDOS = with_top(patternProperties={"^(a+)+$": {"type": "string"}})
ATTACKS = {
    "patternProperties-redos": REDOS,
    "ref-url": with_top(**{"$ref": "https://attacker.example/schema.json"}),
    "ref-missing-path": with_top(**{"$ref": "#/$defs/missing"}),
    "dynamic-ref": with_top(**{"$dynamicRef": "#meta"}),
    "ref-in-a-property": {"type": "object", "properties": {"v": {"$ref": "#"}}},
    "85-nested-allOf": with_top(allOf=[nested_all_of(85)]),
}


@pytest.mark.parametrize("schema", ATTACKS.values(), ids=ATTACKS.keys())
def test_sec7_each_attack_of_issue_15_is_refused_before_it_becomes_a_ticket(schema):
    problems = schema_problems(schema)
    assert problems, "accepted"
    assert all(isinstance(p, str) and len(p) < 400 for p in problems)


@pytest.mark.parametrize(
    "schema",
    [
        with_top(anyOf=[{"type": "object"}]),
        with_top(oneOf=[{"type": "object"}]),
        with_top(**{"not": {"type": "string"}}),
        with_top(**{"if": {"type": "object"}, "then": {"type": "object"}}),
        with_top(**{"$defs": {"x": {"type": "string"}}}),
        with_top(dependentSchemas={"v": {"type": "object"}}),
        with_top(propertyNames={"pattern": "^a"}),
        with_top(unevaluatedProperties=False),
        with_top(additionalProperties={"type": "string"}),
        {"type": "object", "properties": {"v": {"type": "string", "format": "email"}}},
        {"type": "object", "properties": {"v": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"v": {"type": "string", "minItems": 1}}},
        {"type": "object", "properties": {"v": {"type": "array", "uniqueItems": True}}},
        {"type": "object", "properties": {"v": {"type": "array", "contains": {}}}},
        {"type": "object", "properties": {"v": {"type": "array", "items": {"type": "object"}}}},
        {"type": "object", "properties": {"v": {"type": "string", "const": {"a": 1}}}},
        {"type": "object", "properties": {"v": {"type": "string", "default": {"a": 1}}}},
        {"type": "object", "properties": {"a.b": {"type": "string"}}},
        {"type": "object", "properties": {}},
        nested_objects(MAX_NESTING + 1),
    ],
)
def test_sec7_only_the_closed_keyword_set_is_accepted(schema):
    assert schema_problems(schema)


VALID = {
    "type": "object",
    "title": "Release",
    "properties": {
        "version": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+$", "maxLength": 20},
        "channel": {"type": "string", "const": "stable"},
        "share": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "tags": {
            "type": "array",
            "items": {"type": "string", "enum": ["a", "b", "c"]},
            "minItems": 1,
            "maxItems": 3,
        },
        "owner": {
            "type": "object",
            "properties": {"name": {"type": "string", "minLength": 1}, "team": {"type": "integer"}},
            "required": ["name"],
            "additionalProperties": False,
        },
    },
    "required": ["version", "tags", "owner"],
    "additionalProperties": False,
}


def test_sec7_the_whole_keyword_set_nested_to_the_bound_is_accepted():
    assert schema_problems(VALID) == []
    assert schema_problems(nested_objects(MAX_NESTING)) == []
    good = {"version": "1.2", "tags": ["a"], "owner": {"name": "x"}}
    assert answer_errors(VALID, good) == {}
    errors = answer_errors(VALID, {"version": "x", "tags": [], "owner": {}, "extra": 1})
    assert {"version", "tags", "owner/name", ""} <= set(errors)


def test_sec7_an_answer_to_a_redos_schema_written_earlier_is_refused_at_once():
    """A ticket stored before the rule holds `patternProperties: {"^(a+)+$": …}`; a
    27-character key held the request for 5 s under Python's `re`. It is never run."""
    started = time.perf_counter()
    errors = answer_errors(REDOS, {"v": "x", "a" * 27 + "!": "x"})
    assert time.perf_counter() - started < 0.5
    assert errors[""] == ["The question's schema is not one agentruns can check."]


@pytest.mark.parametrize("name", ["ref-url", "ref-missing-path", "dynamic-ref"])
def test_sec7_an_answer_to_a_reference_schema_written_earlier_is_an_error_not_a_raise(name):
    assert "" in answer_errors(ATTACKS[name], {"v": "x"})


def test_sec7_checking_a_large_answer_against_the_largest_schema_takes_bounded_time():
    """Every string matched by an RE2 pattern, a 500 000-character answer: well under 1 s."""
    properties = {
        f"p{i}": {"type": "string", "pattern": "^(a+)+$", "maxLength": 10**6} for i in range(20)
    }
    schema = {"type": "object", "properties": properties}
    assert schema_problems(schema) == []
    value = {name: "a" * 25_000 + "!" for name in properties}
    started = time.perf_counter()
    errors = answer_errors(schema, value)
    assert time.perf_counter() - started < 1.0
    assert set(errors) == set(properties)


# --- end to end, through the fake provider ---------------------------------------------


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeProvider(api_key=KEY) as server:
        yield server


def asking(schema: dict):
    call = {"id": "ask", "name": "ask_user", "arguments": {"question": "Which?", "schema": schema}}

    def reply(body, path):
        if tool_messages(body):
            return {"text": "carrying on"}
        return {"tool_calls": [call]}

    return reply


@pytest.mark.django_db
@pytest.mark.parametrize("schema", ATTACKS.values(), ids=ATTACKS.keys())
def test_sec7_an_attack_schema_is_a_model_visible_error_and_the_run_carries_on(staff, fake, schema):
    fake.default = asking(schema)
    openai_configuration("q", fake, allowed_tools=["ask_user"])
    run = submit(staff, "q")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    run.refresh_from_db()
    assert run.attempts == 0
    assert not Ticket.objects.filter(run=run).exists()
    result = results_by_call(run.pk)["ask"]
    assert result["status"] == ev.ERROR
    # 85 nested allOf are 170 JSON levels: refused as unstorable before the schema check.
    assert result["content"].startswith("Error: ")
    [told] = tool_messages(fake.requests[-1].body)
    assert told["content"] == result["content"]


@pytest.mark.django_db
def test_sec7_answering_a_reference_ticket_written_earlier_is_a_422_not_a_500(staff, fake):
    """A ticket stored before the rule with a `$ref` to a URL: the answer is refused
    (`invalid_input`) and the ticket stays active, to expire or be cancelled."""
    from tests.conftest import grant

    fake.default = asking(NAMED)
    openai_configuration("q", fake, allowed_tools=["ask_user"])
    run = submit(grant(staff, "approve_run"), "q")
    assert execute_run(run.pk) == "awaiting"
    ticket = active_ticket(run.pk)
    Ticket.objects.filter(pk=ticket.pk).update(schema=ATTACKS["ref-url"])
    ticket.refresh_from_db()

    response = resume(client_for(staff), run.pk, answer(ticket, {"v": "x"}))

    assert response.status_code == 422, response.content
    assert response.json()["code"] == "invalid_input"
    assert Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.ACTIVE


@pytest.mark.django_db
def test_hitl6_a_valid_schema_is_asked_in_the_inbox_and_answered_end_to_end(member, fake):
    """The inbox renders every control of the full keyword set (a textarea for the array,
    a fieldset for the nested object), the plain POST is checked against the schema, and
    the model receives the typed value."""
    fake.default = asking(VALID)
    openai_configuration("q", fake, allowed_tools=["ask_user"])
    run = submit(member, "q")
    assert execute_run(run.pk) == "awaiting"
    ticket = active_ticket(run.pk)
    browser = Client()
    browser.force_login(member)

    html = unescape(browser.get(f"/inbox/{ticket.correlation_id}/").content.decode())

    cid = ticket.correlation_id
    assert re.search(rf'<textarea id="q-{cid}-value__tags" name="value\.tags"', html)
    assert "one per line, each one of: a, b, c" in html
    assert "<legend>Owner</legend>" in html
    assert f'id="q-{cid}-value__owner__name"' in html
    data = {
        **identity(ticket),
        "kind": "input",
        "next": "/inbox/",
        "value.version": "2.10",
        "value.channel": "stable",
        "value.share": "0.5",
        "value.tags": "a\r\nc\r\n",
        "value.owner.name": "Ada",
        "value.owner.team": "7",
    }
    response = browser.post(f"/inbox/{ticket.correlation_id}/resume/", data, follow=True)
    assert response.status_code == 200
    assert Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.ANSWERED

    assert execute_run(run.pk) == Run.Status.COMPLETED
    [told] = tool_messages(fake.requests[-1].body)
    assert '"tags": ["a", "c"]' in told["content"]
    assert '"owner": {"name": "Ada", "team": 7}' in told["content"]
    assert Event.objects.filter(run=run, type=ev.TICKET_DECIDED).count() == 1
