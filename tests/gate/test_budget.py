"""LOOP-6: `max_tool_calls` is a budget over the run. A turn proposing more calls than
remain is fitted: the first calls in model order run, the rest get a model-visible refusal
recorded as events; refusals are not usage; the fitting survives a crash."""

from __future__ import annotations

import pytest

from agentruns import events as ev
from agentruns.models import Note, Run, ToolInvocation
from agentruns.runtime.loop import execute_run
from tests.support.crash import (
    EXTERNAL_CALL,
    NOTE_CALL,
    effect_lines,
    expire_lease,
    history,
    make_openai_configuration,
    point_where,
    provider_pairing_problems,
    run_child,
    submit,
    turns_committed,
    two_tool_configuration,
    two_tool_reply,
)
from tests.support.fake_provider import FakeProvider

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake():
    with FakeProvider() as server:
        yield server


def echo(call_id: str) -> dict:
    return {"id": call_id, "name": "test_echo", "arguments": {"text": call_id}}


def echo_configuration(fake: FakeProvider, max_tool_calls: int) -> None:
    make_openai_configuration(
        "echo", fake, allowed_tools=["test.echo"], max_tool_calls=max_tool_calls
    )


def results(run: Run) -> list[tuple[str, str, str]]:
    return [
        (p["call_id"], p["status"], p["content"])
        for kind, p in history(run.pk)
        if kind == ev.TOOL_RESULT
    ]


def tool_messages(body: dict) -> list[tuple[str, str]]:
    return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]


def test_a_turn_over_budget_runs_the_first_calls_in_model_order_and_refuses_the_rest(staff, fake):
    """LOOP-6: three calls, two left: the first two run, the third is refused with a
    result the model sees, in model order; the refusal is not usage."""
    echo_configuration(fake, max_tool_calls=2)
    fake.queue({"tool_calls": [echo("a"), echo("b"), echo("c")]}, {"text": "done"})
    run = submit(staff, "echo")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    run.refresh_from_db()
    # The log holds the refusal with its turn, before the executed calls' results.
    recorded = {call_id: (status, text) for call_id, status, text in results(run)}
    assert {call_id: status for call_id, (status, _) in recorded.items()} == {
        "a": ev.OK,
        "b": ev.OK,
        "c": ev.REFUSED,
    }
    c_text = recorded["c"][1]
    assert "budget" in c_text
    assert set(ToolInvocation.objects.filter(run=run).values_list("call_id", flat=True)) == {
        "a",
        "b",
    }
    assert run.tool_calls_used == 2
    turn = next(p for kind, p in history(run.pk) if kind == ev.ASSISTANT)
    assert turn["granted"] == ["a", "b"]
    # Model-visible: the next request answers every call, in model order.
    answered = tool_messages(fake.requests[1].body)
    assert [call_id for call_id, _ in answered] == ["a", "b", "c"]
    assert answered[2][1] == c_text
    assert provider_pairing_problems(run.pk) == []


def test_calls_refused_for_other_reasons_do_not_spend_the_budget(staff, fake):
    """LOOP-6: refusals are not usage — an unknown tool (TOOL-2) refused before fitting
    leaves both budgeted calls to the valid ones."""
    echo_configuration(fake, max_tool_calls=2)
    unknown = {"id": "x", "name": "no_such_tool", "arguments": {}}
    fake.queue({"tool_calls": [unknown, echo("a"), echo("b")]}, {"text": "done"})
    run = submit(staff, "echo")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    run.refresh_from_db()
    statuses = [(call_id, status) for call_id, status, _ in results(run)]
    assert sorted(statuses) == [("a", ev.OK), ("b", ev.OK), ("x", ev.REFUSED)]
    assert run.tool_calls_used == 2


@pytest.fixture
def deaf():
    """A server that ignores `tool_choice` (Ollama's): told "none" once the budget is
    spent, its model may call tools still, and the fitting refuses them."""
    with FakeProvider(server="ollama") as server:
        yield server


def test_a_turn_after_the_budget_is_spent_refuses_every_call(staff, deaf):
    """LOOP-6: the budget is over the run, not the turn."""
    fake = deaf
    echo_configuration(fake, max_tool_calls=2)
    fake.queue(
        {"tool_calls": [echo("a"), echo("b")]},
        {"tool_calls": [echo("c"), echo("d")]},
        {"text": "done"},
    )
    run = submit(staff, "echo")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    run.refresh_from_db()
    statuses = sorted((call_id, status) for call_id, status, _ in results(run))
    assert statuses == [("a", ev.OK), ("b", ev.OK), ("c", ev.REFUSED), ("d", ev.REFUSED)]
    turns = [p for kind, p in history(run.pk) if kind == ev.ASSISTANT]
    assert [(t["tool_calls_before"], t["granted"]) for t in turns[:2]] == [
        (0, ["a", "b"]),
        (2, []),
    ]
    assert ToolInvocation.objects.filter(run=run).count() == 2
    assert run.tool_calls_used == 2
    assert [call_id for call_id, _ in tool_messages(fake.requests[2].body)] == [
        "a",
        "b",
        "c",
        "d",
    ]


def test_a_zero_budget_refuses_every_call_and_the_run_still_answers(staff, deaf):
    fake = deaf
    echo_configuration(fake, max_tool_calls=0)
    fake.queue({"tool_calls": [echo("a")]}, {"text": "done without tools"})
    run = submit(staff, "echo")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    run.refresh_from_db()
    assert [(c, s) for c, s, _ in results(run)] == [("a", ev.REFUSED)]
    assert run.final_reply == "done without tools"
    assert run.tool_calls_used == 0
    assert not ToolInvocation.objects.filter(run=run).exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_refused_call_never_runs_after_a_crash_right_after_its_turn(staff, tmp_path):
    """LOOP-6 across a crash: the worker is SIGKILLed right after the fitted turn
    committed; the resumed run executes the granted call once and never the refused one."""
    effects = tmp_path / "effects.log"
    with FakeProvider(default=two_tool_reply) as fake:
        two_tool_configuration(fake, max_tool_calls=1)
        point = point_where(staff, "two-tool", turns_committed)
        run = submit(staff, "two-tool")

        child = run_child(run.pk, faults=point, effect_file=effects)
        assert child.killed, str(child)
        # The refusal is already in the log, with the turn it belongs to.
        refused = [p["call_id"] for k, p in history(run.pk) if k == ev.TOOL_RESULT]
        assert refused == [EXTERNAL_CALL["id"]]

        expire_lease(run.pk)
        resumed = run_child(run.pk, effect_file=effects)
        assert resumed.returncode == 0 and "outcome=completed" in resumed.stdout, str(resumed)

    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    assert effect_lines(effects, run.pk) == []
    assert not ToolInvocation.objects.filter(run=run, call_id=EXTERNAL_CALL["id"]).exists()
    assert sorted((c, s) for c, s, _ in results(run)) == [
        (EXTERNAL_CALL["id"], ev.REFUSED),
        (NOTE_CALL["id"], ev.OK),
    ]
    assert Note.objects.filter(run=run).count() == 1
    assert run.tool_calls_used == 1
