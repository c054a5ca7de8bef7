"""FORK-1: forking a run at a model turn. The new run starts on a new thread from a copy of
the original's effective context; copied tool results are reused, never executed again;
the fork is gated against its own configuration, carrying its original's sources; only
those who see the original may fork it; a parked turn forks without its ticket."""

from __future__ import annotations

from typing import Any

import pytest

from agentruns import events as ev
from agentruns.events import LogEntry
from agentruns.models import Event, Note, Run, Ticket, ToolInvocation
from agentruns.runtime.context import effective_events, project
from agentruns.runtime.deferred import active_deferred
from agentruns.runtime.fork import plan_fork
from agentruns.runtime.loop import execute_run
from tests.conftest import grant
from tests.support.catalog import make_openai_configuration, make_snippet, scripted_configuration
from tests.support.fake_provider import FakeProvider
from tests.support.hitl import client_for, write_call
from tests.support.runs import submit

pytestmark = pytest.mark.django_db


def fork(client: Any, run_id: int, **body: Any) -> Any:
    return client.post(f"/api/runs/{run_id}/fork/", body, format="json")


def assistant_sequences(run: Run) -> list[int]:
    rows = Event.objects.filter(run=run, type=ev.ASSISTANT).order_by("sequence")
    return list(rows.values_list("sequence", flat=True))


def write(value: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "test.external_write", "arguments": {"value": value}}]}


@pytest.fixture
def fake():
    with FakeProvider() as provider:
        yield provider


def five_turns(fake: FakeProvider, staff: Any) -> Run:
    """Four turns that each write an external effect, then a final reply."""
    make_openai_configuration(
        "five",
        fake,
        allowed_tools=["test"],
        approval_exempt_tools=["test.external_write"],
        system_prompt="You keep a ledger.",
    )
    fake.queue(*(write(f"v{n}") for n in range(1, 5)), {"text": "all written"})
    run = submit(staff, "five", "write four values")
    assert execute_run(run.pk) == Run.Status.COMPLETED
    return run


def test_fork1_at_turn_three_sends_the_first_three_turns_and_runs_no_copied_tool(
    fake, staff, api, effects
):
    original = five_turns(fake, staff)
    sent_to_turn_four = fake.requests[3].body["messages"]  # the context of turns 1..3
    assert len(effects.read_text().splitlines()) == 4
    fake.clear()
    fake.queue({"text": "forked reply"})

    at = assistant_sequences(original)[2]
    response = fork(api, original.pk, at=at)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["forked_from"] == {"run": original.pk, "at": at}
    assert body["thread"] != original.thread_id and body["configuration"] == "five"
    assert execute_run(body["id"]) == Run.Status.COMPLETED

    (request,) = fake.requests  # one send: the model is asked for turn 4, nothing else
    assert request.body["messages"] == sent_to_turn_four
    assert len(effects.read_text().splitlines()) == 4  # no copied call ran again
    assert not ToolInvocation.objects.filter(run_id=body["id"]).exists()
    forked = Run.objects.get(pk=body["id"])
    assert (forked.forked_from_id, forked.forked_at) == (original.pk, at)
    assert forked.final_reply == "forked reply"
    opening = Event.objects.get(thread=forked.thread_id, sequence=1)
    assert opening.type == ev.RUN_FORKED
    assert opening.payload["forked_from"] == {"run": original.pk, "at": at}


def test_fork1_onto_a_configuration_with_a_less_trusted_provider_is_refused_naming_the_source(
    fake, staff, api
):
    """CG-7, CG-8: the original's restricted snippet is carried; the fork's configuration
    has no such snippet, but its provider may not see what the transcript made of it."""
    records = make_snippet("customer-records", data_class="restricted")
    scripted_configuration(
        "inside",
        [{"tool_calls": [{"name": "test.echo", "arguments": {"text": "x"}}]}, {}],
        allowed_tools=["test"],
        snippets=[records],
    )
    original = submit(staff, "inside", "look up the customer")
    assert execute_run(original.pk) == Run.Status.COMPLETED
    make_openai_configuration("outside", fake, zone="external_global", allowed_tools=["test"])

    response = fork(api, original.pk, at=assistant_sequences(original)[0], configuration="outside")
    assert response.status_code == 201, response.content
    assert execute_run(response.json()["id"]) == Run.Status.FAILED

    forked = Run.objects.get(pk=response.json()["id"])
    failure = forked.failure
    assert failure["code"] == "context_refused"
    assert (failure["source_kind"], failure["source_name"]) == ("snippet", "customer-records")
    assert failure["carried_from"] == original.pk
    assert failure["zone"] == "external_global" and failure["data_class"] == "restricted"
    assert f'snippet "customer-records" (carried from run #{original.pk})' in failure["detail"]
    assert "text of snippet" not in failure["detail"]
    assert fake.requests == []  # nothing was sent
    readout = api.get(f"/api/runs/{forked.pk}/").json()["readout"]
    assert readout["effective_source"]["carried_from"] == original.pk
    assert readout["verdict"] == "refused"


def test_fork1_a_carried_source_binds_by_class_and_sends_no_text(fake, staff, api):
    notice = make_snippet("house-rules", data_class="internal", text="RULES-TEXT")
    scripted_configuration("ruled", [{"text": "ok"}], snippets=[notice])
    original = submit(staff, "ruled", "hello")
    assert execute_run(original.pk) == Run.Status.COMPLETED
    make_openai_configuration("plain", fake, zone="external_eu")
    fake.queue({"text": "again"})

    response = fork(api, original.pk, configuration="plain", input="and now?")
    assert execute_run(response.json()["id"]) == Run.Status.COMPLETED

    (request,) = fake.requests
    assert "RULES-TEXT" not in str(request.body)
    roles = [(m["role"], m.get("content")) for m in request.body["messages"]]
    assert roles == [("user", "hello"), ("assistant", "ok"), ("user", "and now?")]


def test_fork1_of_a_run_the_user_cannot_see_is_a_404(staff, member):
    scripted_configuration("mine", [{"text": "private"}])
    original = submit(staff, "mine", "go")
    assert execute_run(original.pk) == Run.Status.COMPLETED

    response = fork(client_for(member), original.pk, input="show me")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert Run.objects.count() == 1


def test_fork1_a_run_that_forced_sources_forks_only_from_the_playground(staff, member):
    """FS-5: the fork keeps the forced set, so forking it is forcing it."""
    grant(member, "view_all_runs")
    extra = make_snippet("extra")
    scripted_configuration("forcing", [{"text": "done"}])
    original = submit(staff, "forcing", "go", forced_snippets=[extra.pk])
    assert execute_run(original.pk) == Run.Status.COMPLETED

    refused = fork(client_for(member), original.pk, input="again")
    assert refused.status_code == 403
    allowed = fork(client_for(staff), original.pk, input="again")
    assert allowed.status_code == 201
    assert allowed.json()["forced_snippets"] == [extra.pk]


def test_fork1_at_a_parked_turn_starts_without_the_ticket_and_never_approved(fake, staff, api):
    make_openai_configuration("careful", fake, allowed_tools=["notes"])
    fake.queue({"tool_calls": [write_call("plan")]})
    original = submit(staff, "careful", "write the plan")
    assert execute_run(original.pk) == Run.Status.AWAITING
    fake.clear()
    fake.queue({"text": "understood, not written"})

    response = fork(api, original.pk, at=assistant_sequences(original)[0])
    assert response.status_code == 201, response.content
    fork_id = response.json()["id"]
    assert response.json()["ticket"] is None
    assert execute_run(fork_id) == Run.Status.COMPLETED

    (request,) = fake.requests
    (result,) = [m for m in request.body["messages"] if m["role"] == "tool"]
    assert result["content"].startswith(f"Not decided in the original run #{original.pk}")
    assert Note.objects.count() == 0
    assert not Ticket.objects.filter(run_id=fork_id).exists()
    assert not ToolInvocation.objects.filter(run_id=fork_id).exists()
    original.refresh_from_db()
    assert original.status == Run.Status.AWAITING  # the original still waits for its decision
    assert Ticket.objects.get(run=original).status == Ticket.Status.ACTIVE


def test_fork1_from_a_final_reply_needs_a_new_prompt(staff, api):
    scripted_configuration("short", [{"text": "the answer"}])
    original = submit(staff, "short", "ask")
    assert execute_run(original.pk) == Run.Status.COMPLETED

    refused = fork(api, original.pk)
    assert refused.status_code == 400
    assert "needs a new prompt" in refused.json()["detail"]
    not_a_turn = fork(api, original.pk, at=1, input="x")  # message.user, not a model turn
    assert not_a_turn.status_code == 400
    assert "not a model turn" in not_a_turn.json()["fields"]["at"][0]


def test_fork1_onto_an_unknown_configuration_is_a_400(staff, api):
    scripted_configuration("known", [{"text": "hi"}])
    original = submit(staff, "known", "ask")
    response = fork(api, original.pk, configuration="nope", input="x")
    assert response.status_code == 400
    assert Run.objects.count() == 1


# --- the copy as a pure function (DEF-4, DEF-6) -------------------------------------------


def entry(sequence: int, kind: str, run: int | None = 7, **payload: Any) -> LogEntry:
    return LogEntry(sequence, kind, payload, run)


def call(call_id: str, name: str = "clock.now") -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": {}}


def result(call_id: str, name: str = "clock.now", **extra: Any) -> dict[str, Any]:
    return {"call_id": call_id, "tool": name, "status": "ok", "content": f"r-{call_id}", **extra}


ORIGINAL = [
    entry(1, ev.USER, text="first prompt", run=6),
    entry(2, ev.ASSISTANT, run=6, step=0, text="first answer", tool_calls=[]),
    entry(3, ev.RUN_COMPLETED, run=6, final_reply="first answer"),
    entry(4, ev.MODE_SWITCHED, run=None, mode="agent"),
    entry(5, ev.USER, text="second prompt"),
    entry(6, ev.ASSISTANT, step=0, tool_calls=[call("s1", "tool_search")], usage={"x": 1}),
    entry(7, ev.TOOL_RESULT, **result("s1", "tool_search", added_tool_names=["http.get"])),
    entry(8, ev.ASSISTANT, step=1, tool_calls=[call("c2")]),
    entry(9, ev.TOOL_RESULT, **result("c2")),
    entry(10, ev.COMPACTION, summary="S", kept_from=8, active_deferred=["http.get"]),
    entry(11, ev.ASSISTANT, step=2, tool_calls=[call("c3"), call("c4")]),
    entry(12, ev.TICKET_OPENED, call_id="c4"),
    entry(13, ev.TOOL_RESULT, **result("c3")),
    entry(14, ev.ASSISTANT, step=3, text="done", tool_calls=[]),
]


def as_log(plan_items: list[tuple[bool, str, dict[str, Any]]]) -> list[LogEntry]:
    return [
        LogEntry(i, kind, payload, 99 if own else None)
        for i, (own, kind, payload) in enumerate(plan_items, 1)
    ]


@pytest.mark.parametrize("at", [6, 8, 11])
def test_fork1_the_copy_composes_what_the_original_would_send_next(at):
    """DEF-6: the fork's effective context projects to the original's as of that turn
    (compaction summary included), and DEF-4: it activates the same deferred tools."""
    plan = plan_fork(ORIGINAL, run_id=7, at=at, new_prompt=False, forked={})
    copied = effective_events(as_log(plan.items))
    upto = {6: 7, 8: 9, 11: 13}[at]  # the turn and the results that answered it
    answered = [e for e in ORIGINAL if e.sequence <= upto]
    expected = project(effective_events(answered))
    got = project(copied)
    if at == 11:  # the parked call c4 gets its "not decided" result, never an approval
        assert got[:-1] == expected
        assert got[-1].call_id == "c4" and got[-1].is_error
        assert got[-1].content.startswith("Not decided in the original run #7")
    else:
        assert got == expected
    catalog = ["http.get"]
    assert active_deferred(copied, catalog) == active_deferred(effective_events(answered), catalog)
    modes = [e.payload["mode"] for e in as_log(plan.items) if e.type == ev.MODE_SWITCHED]
    assert modes == ["agent"]  # DEF-1: the thread's mode goes with it


def test_fork1_continues_the_run_and_keeps_the_earlier_runs_as_history():
    plan = plan_fork(ORIGINAL, run_id=7, at=8, new_prompt=False, forked={"carried": []})
    owners = [(own, kind) for own, kind, _ in plan.items]
    assert owners == [
        (True, ev.RUN_FORKED),
        (False, ev.MODE_SWITCHED),
        (False, ev.USER),
        (False, ev.ASSISTANT),
        (True, ev.USER),
        (True, ev.ASSISTANT),
        (True, ev.TOOL_RESULT),
        (True, ev.ASSISTANT),
        (True, ev.TOOL_RESULT),
    ]
    payloads = [payload for _, _, payload in plan.items]
    assert payloads[0]["forked_from"] == {"run": 7, "at": 8}
    assert "usage" not in payloads[5]  # the original paid for it (OPS-1)
    assert payloads[5]["copied_from"] == {"run": 7, "sequence": 6}


def test_fork1_with_a_new_prompt_everything_copied_is_history():
    plan = plan_fork(ORIGINAL, run_id=7, at=None, new_prompt=True, forked={})
    assert [own for own, _, _ in plan.items][1:] == [False] * (len(plan.items) - 1)
    assert plan.at == 14


def test_fork1_a_dry_run_on_a_forks_thread_reads_out_the_carried_sources(staff, api):
    """CG-10: the readout folds the list the gate folds, carried sources included."""
    records = make_snippet("ledger", data_class="confidential")
    scripted_configuration("kept", [{"text": "ok"}], snippets=[records])
    scripted_configuration("other", [{"text": "ok"}])
    original = submit(staff, "kept", "hello")
    assert execute_run(original.pk) == Run.Status.COMPLETED
    forked = fork(api, original.pk, configuration="other", input="more").json()
    assert execute_run(forked["id"]) == Run.Status.COMPLETED

    body = {"configuration": "other", "input": "again", "thread": forked["thread"], "dry_run": True}
    dry = api.post("/api/runs/", body, format="json").json()
    (carried,) = [row for row in dry["readout"]["sources"] if row.get("carried_from")]
    assert (carried["name"], carried["carried_from"]) == ("ledger", original.pk)
    assert "text of snippet ledger" not in str(dry["messages"])


def test_fork1_a_fork_of_a_fork_still_carries_the_first_runs_sources(fake, staff, api):
    records = make_snippet("payroll", data_class="restricted")
    scripted_configuration("hr", [{"text": "noted"}], snippets=[records])
    scripted_configuration("relay", [{"text": "relayed"}])
    make_openai_configuration("abroad", fake, zone="external_global")
    original = submit(staff, "hr", "salaries")
    assert execute_run(original.pk) == Run.Status.COMPLETED
    middle = fork(api, original.pk, configuration="relay", input="pass it on").json()
    assert execute_run(middle["id"]) == Run.Status.COMPLETED  # local: permitted

    last = fork(api, middle["id"], configuration="abroad", input="and abroad?").json()
    assert execute_run(last["id"]) == Run.Status.FAILED
    failure = Run.objects.get(pk=last["id"]).failure
    assert (failure["source_name"], failure["carried_from"]) == ("payroll", original.pk)
    assert fake.requests == []
