"""HITL-6, SEC-4: a model-supplied `ask_user` schema is checked for safety before it
becomes a ticket (bounded size, RE2-only patterns), and an answer is validated against it
after redaction, since the redacted value is what is stored and sent."""

from __future__ import annotations

import time

import pytest

from agentruns.answers import answer_errors, schema_problems
from agentruns.runtime.loop import execute_run
from tests.conftest import grant
from tests.support.catalog import KEY, KEY_ENV, openai_configuration
from tests.support.fake_provider import FakeProvider
from tests.support.hitl import active_ticket, answer, client_for, resume
from tests.support.runs import submit


def one(spec: dict) -> dict:
    return {"type": "object", "properties": {"v": spec}, "required": ["v"]}


def test_a_catastrophic_pattern_runs_in_linear_time():
    """`(a+)+$` backtracks exponentially in Python's `re`; RE2 answers at once."""
    schema = one({"type": "string", "pattern": "^(a+)+$"})
    assert schema_problems(schema) == []
    started = time.perf_counter()
    errors = answer_errors(schema, {"v": "a" * 50_000 + "!"})
    assert time.perf_counter() - started < 1.0
    assert "v" in errors
    assert answer_errors(schema, {"v": "aaaa"}) == {}


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"type": "string", "pattern": r"(a)\1"}, "safe (RE2)"),
        ({"type": "string", "pattern": "(?=a)a"}, "safe (RE2)"),
        ({"type": "string", "pattern": "a" * 501}, "at most 500"),
        ({"type": "string", "enum": [str(i) for i in range(101)]}, "at most 100"),
        ({"type": "string", "enum": [{"nested": True}]}, "scalars"),
        ({"type": "string", "description": "x" * 20_000}, "under 16000"),
    ],
)
def test_an_unsafe_schema_is_refused_before_it_becomes_a_ticket(spec, problem):
    problems = schema_problems(one(spec))
    assert any(problem in p for p in problems), problems


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeProvider(api_key=KEY) as server:
        yield server


@pytest.mark.django_db
def test_an_answer_is_validated_after_redaction(staff, fake):
    """SEC-4: under a secret-like key the stored value is the marker; an answer whose
    redacted form breaks the schema is refused (422) instead of stored broken."""
    approver = grant(staff, "approve_run")
    schema = {
        "type": "object",
        "properties": {"api_key": {"type": "string", "pattern": "^[0-9]{4,}$"}},
        "required": ["api_key"],
    }
    ask = {"id": "c1", "name": "ask_user", "arguments": {"question": "Key?", "schema": schema}}

    def reply(body, path):
        if any(m.get("role") == "tool" for m in body["messages"]):
            return {"text": "thanks"}
        return {"text": "", "tool_calls": [ask]}

    fake.default = reply
    openai_configuration("q", fake, allowed_tools=["ask_user"])
    run = submit(approver, "q")
    assert execute_run(run.pk) == "awaiting"
    ticket = active_ticket(run.pk)
    assert answer_errors(schema, {"api_key": "123456"}) == {}  # the raw answer fits
    response = resume(client_for(approver), run.pk, answer(ticket, {"api_key": "123456"}))
    assert response.status_code == 422, response.content
    assert response.json()["code"] == "invalid_input"
    assert "123456" not in response.content.decode()
