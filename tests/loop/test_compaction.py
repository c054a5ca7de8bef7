"""DEF-6: an over-budget context is compacted before it is sent.

The integration tests read the fake provider's request log and count every turn request
with `agentruns.providers.tokens`, the runtime's own counter; the planning is tested pure.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentruns import events as ev
from agentruns.events import LogEntry
from agentruns.models import Event, GateAudit
from agentruns.providers.base import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from agentruns.providers.tokens import fixed_tokens, message_bytes, message_tokens
from agentruns.runtime import compaction
from agentruns.runtime.actions.compact import SUMMARY_INSTRUCTION
from agentruns.runtime.context import SUMMARY_PREFIX, effective_events, pairing_problems
from agentruns.runtime.deferred import active_deferred
from agentruns.runtime.loop import execute_run
from tests.support.catalog import make_configuration, make_openai_configuration, make_provider
from tests.support.deferred import (
    Script,
    call,
    fake_server,
    is_summary,
    modes,
    offered,
    search,
    summary_requests,
    thread_events,
    turn,
    turn_requests,
)
from tests.support.fake_provider import FakeProvider
from tests.support.runs import prompt, submit

SUMMARY = "SUMMARY-TEXT"


@pytest.fixture
def staff(django_user_model):
    # No password: hashing one costs more than the test.
    return django_user_model.objects.create(username="staff", is_staff=True)


def clock_configuration(fake: Any, *, budget: int) -> None:
    """`cfg`: one core tool (`clock.now`) and a tight context budget."""
    make_openai_configuration(
        "cfg",
        fake,
        allowed_tools=["clock.now"],
        modes=modes(agent=(["clock.now"], [])),
        context_budget_tokens=budget,
    )


def words(n: int, word: str = "hello") -> str:
    """Exactly n cl100k tokens."""
    return " ".join([word] * n)


# ---------------------------------------------------------------- reading requests back


def neutral_messages(body: dict[str, Any]) -> list[Message]:
    """A Chat Completions body back into the runtime's neutral messages."""
    messages: list[Message] = []
    for m in body["messages"]:
        if m["role"] == "user":
            messages.append(UserMessage(m["content"]))
        elif m["role"] == "assistant":
            calls = []
            for c in m.get("tool_calls") or ():
                raw = c["function"]["arguments"]
                arguments = json.loads(raw)
                calls.append(ToolCall(c["id"], c["function"]["name"], arguments))
            messages.append(AssistantMessage(m.get("content") or "", tuple(calls)))
        elif m["role"] == "tool":
            messages.append(ToolResultMessage(m["tool_call_id"], "", m["content"]))
    return messages


def request_tokens(body: dict[str, Any]) -> int:
    """What the runtime counts for a send: system texts, tool specs and messages."""
    system = [m["content"] for m in body["messages"] if m["role"] == "system"]
    specs = [
        ToolSpec(t["function"]["name"], t["function"]["description"], t["function"]["parameters"])
        for t in body.get("tools") or ()
    ]
    return fixed_tokens(system, specs) + sum(message_tokens(m) for m in neutral_messages(body))


def conversation(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] != "system"]


def compactions(thread_id: int) -> list[Event]:
    return [e for e in thread_events(thread_id) if e.type == ev.COMPACTION]


def assert_summary_request_is_plain(body: dict[str, Any]) -> None:
    assert "tools" not in body
    system, user = body["messages"]
    assert system == {"role": "system", "content": SUMMARY_INSTRUCTION}
    assert user["role"] == "user" and isinstance(user["content"], str)


# ---------------------------------------------------------------- compaction before send


@pytest.mark.django_db
def test_def6_an_over_budget_context_is_compacted_before_it_is_sent(staff):
    budget = 400
    with fake_server(search("weather"), summary=SUMMARY) as (fake, _script):
        make_openai_configuration(
            "cfg",
            fake,
            allowed_tools=["clock.now", "deftest"],
            modes=modes(agent=(["clock.now"], ["deftest.weather", "deftest.verbose"])),
            context_budget_tokens=budget,
        )
        first = prompt(staff, "cfg", words(150))
        assert not compactions(first.thread_id)
        before = len(fake.requests)
        prompt(staff, "cfg", words(150, "again"), thread=first.thread_id)
    summary_request, after = fake.requests[before:]
    # The summary came first, asked for no tools and read a plain transcript.
    assert_summary_request_is_plain(summary_request.body)
    transcript = summary_request.body["messages"][1]["content"]
    assert "tool_search" in transcript and "Activated: deftest.weather" in transcript
    # The turn request: under budget, opening with the summary.
    assert request_tokens(after.body) <= budget
    opening = conversation(after.body)[0]
    assert opening == {"role": "user", "content": SUMMARY_PREFIX + SUMMARY}
    assert conversation(after.body)[-1] == {"role": "user", "content": words(150, "again")}
    # The activation evidence was summarised away but the compaction carried it.
    [event] = compactions(first.thread_id)
    assert event.payload["active_deferred"] == ["deftest.weather"]
    assert event.payload["summary"] == SUMMARY
    searched = [
        e.sequence for e in thread_events(first.thread_id) if e.payload.get("tool") == "tool_search"
    ]
    assert searched and max(searched) < event.payload["kept_from"]
    assert not [m for m in conversation(after.body) if m["role"] == "tool"]
    assert "deftest_weather" in offered(after)


@pytest.mark.django_db
@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_def6_compaction_mid_prompt_never_splits_a_call_from_its_result(staff, wire):
    budget = 600
    echo = [turn(call("test.echo", {"text": words(60, "word")})) for _ in range(8)]
    with fake_server(*echo, summary=SUMMARY, final="all echoed") as (fake, _script):
        provider = make_provider(
            "p",
            zone="local",
            kind=wire,
            base_url=fake.openai_base_url if wire == "openai" else fake.anthropic_base_url,
            max_retries=0,
            timeout_seconds=10,
        )
        make_configuration(
            "cfg",
            provider=provider,
            model="m",
            allowed_tools=["test.echo"],
            modes=modes(agent=(["test.echo"], [])),
            context_budget_tokens=budget,
        )
        # The fake server answers 400 to any unpaired history, which would fail the run.
        run = prompt(staff, "cfg", words(40))
    assert run.final_reply == "all echoed"
    events = compactions(run.thread_id)
    assert len(events) >= 2
    by_sequence = {e.sequence: e for e in thread_events(run.thread_id)}
    for event in events:
        assert by_sequence[event.payload["kept_from"]].type in {ev.USER, ev.ASSISTANT}
    assert len(summary_requests(fake)) == len(events)
    if wire == "openai":
        for request in summary_requests(fake):
            assert_summary_request_is_plain(request.body)
        for request in turn_requests(fake):
            assert pairing_problems(neutral_messages(request.body)) == []
            assert request_tokens(request.body) <= budget


@pytest.mark.django_db
def test_def6_a_context_that_cannot_fit_even_after_compaction_fails(staff):
    with fake_server(summary=SUMMARY) as (fake, _script):
        clock_configuration(fake, budget=300)
        first = prompt(staff, "cfg", words(100))
        before = len(fake.requests)
        second = prompt(staff, "cfg", words(400), thread=first.thread_id, expect="failed")
    assert (second.failure or {}).get("code") == "context_budget_exceeded"
    # Nothing over budget reached the provider: only the summary request was made.
    [only] = fake.requests[before:]
    assert_summary_request_is_plain(only.body)
    types = [e.type for e in thread_events(first.thread_id) if e.run_id == second.pk]
    assert types[-2:] == [ev.COMPACTION, ev.RUN_FAILED]


@pytest.mark.django_db
def test_def6_a_first_prompt_over_budget_fails_instead_of_being_sent(staff):
    with fake_server() as (fake, _script):
        clock_configuration(fake, budget=300)
        run = submit(staff, "cfg", words(400))
        outcome = execute_run(run.pk)
    sent = [request_tokens(r.body) for r in turn_requests(fake)]
    assert all(tokens <= 300 for tokens in sent), f"sent {sent} tokens, budget 300"
    assert outcome == "failed"
    run.refresh_from_db()
    assert (run.failure or {}).get("code") == "context_budget_exceeded"


@pytest.mark.django_db
def test_int1_the_providers_context_window_bounds_a_send_below_the_budget(staff):
    """INT-1: a context window of 700 tokens with 400 kept for the reply leaves 300, well
    under the configuration's budget of 32000: a prompt of 400 tokens is never sent."""
    with fake_server() as (fake, _script):
        make_openai_configuration(
            "cfg",
            fake,
            allowed_tools=["clock.now"],
            provider_kw={"context_window_tokens": 700, "max_output_tokens": 400},
        )
        run = submit(staff, "cfg", words(400))
        outcome = execute_run(run.pk)
    assert outcome == "failed" and turn_requests(fake) == []
    run.refresh_from_db()
    assert run.failure["code"] == "context_budget_exceeded"
    assert run.failure["budget"] == 300


@pytest.mark.django_db
def test_def6_the_request_after_compaction_is_within_budget_to_the_token(staff):
    budget = 300
    with fake_server(summary="S") as (fake, _script):
        # No tools and no system text: the whole budget is messages.
        make_openai_configuration(
            "cfg", fake, allowed_tools=[], modes=modes(plain=([], [])), context_budget_tokens=budget
        )
        first = prompt(staff, "cfg", words(50))
        # The kept unit (4 + 295 tokens) plus the bare summary (1 token) is exactly the
        # budget; the summary *message* the provider receives is 4 + 7 tokens.
        run = submit(staff, "cfg", words(295), thread=first.thread_id)
        outcome = execute_run(run.pk)
    assert compactions(first.thread_id)
    sent = [request_tokens(r.body) for r in turn_requests(fake)]
    assert all(tokens <= budget for tokens in sent), f"sent {sent} tokens, budget {budget}"
    # Nothing is left to summarise, so the only honest outcome is the budget failure.
    assert outcome == "failed"
    run.refresh_from_db()
    assert (run.failure or {}).get("code") == "context_budget_exceeded"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("answer", "failure"),
    [
        ({"choices": []}, {"code": "provider_malformed_reply", "retryable": False}),
        ({"status": 400, "message": "no"}, {"code": "provider_error", "status": 400}),
    ],
)
def test_def6_a_failed_summary_call_fails_the_run_with_the_providers_code(staff, answer, failure):
    """A compaction's summary call fails the run as a turn's call would (one mapping, in
    `send`): with the provider error's own code and its status, never a generic
    `provider_error` that hides a malformed reply. Nothing over budget is sent."""
    script = Script(summary=SUMMARY)

    def answering(body: dict[str, Any], path: str) -> dict[str, Any]:
        return answer if is_summary(body) else script(body, path)

    with FakeProvider(default=answering) as fake:
        clock_configuration(fake, budget=300)
        first = prompt(staff, "cfg", words(150))
        before = len(fake.requests)
        second = prompt(staff, "cfg", words(120), thread=first.thread_id, expect="failed")
    assert {key: second.failure[key] for key in failure} == failure, second.failure
    assert second.failure["detail"].startswith("Compaction failed:")
    [only] = fake.requests[before:]
    assert is_summary(only.body)
    types = [e.type for e in thread_events(first.thread_id) if e.run_id == second.pk]
    assert ev.COMPACTION not in types and types[-1] == ev.RUN_FAILED


@pytest.mark.django_db
def test_cg9_every_provider_call_of_a_compacting_turn_is_gated_once(staff):
    """CG-9: the summary call and the turn's call each go through `send`, so each
    has its own audit row, decided before it was sent."""
    with fake_server(summary=SUMMARY) as (fake, _script):
        clock_configuration(fake, budget=300)
        first = prompt(staff, "cfg", words(150))
        before = len(fake.requests)
        second = prompt(staff, "cfg", words(120), thread=first.thread_id)
    assert compactions(first.thread_id)
    sent = fake.requests[before:]
    assert [is_summary(r.body) for r in sent] == [True, False]
    audits = GateAudit.objects.filter(run_id=second.pk)
    assert audits.count() == len(sent)


# ---------------------------------------------------------------- DEF-6 evidence, pure


def _result(seq: int, tool: str, **extra: Any) -> LogEntry:
    payload = {"call_id": f"c{seq}", "tool": tool, "status": ev.OK, "content": "x", **extra}
    return LogEntry(seq, ev.TOOL_RESULT, payload)


def _compaction(seq: int, kept_from: int, *carried: str) -> LogEntry:
    payload = {"summary": "s", "kept_from": kept_from, "active_deferred": list(carried)}
    return LogEntry(seq, ev.COMPACTION, payload)


CATALOG = ("http.get", "deftest.weather", "deftest.publish")
HISTORY = [
    LogEntry(1, ev.USER, {"text": "go"}),
    LogEntry(2, ev.ASSISTANT, {"text": "", "tool_calls": [{"id": "c3", "name": "tool_search"}]}),
    _result(3, "tool_search", added_tool_names=["http.get", "deftest.weather"]),
    LogEntry(
        4, ev.ASSISTANT, {"text": "", "tool_calls": [{"id": "c5", "name": "deftest.publish"}]}
    ),
    _result(5, "deftest.publish"),
    LogEntry(6, ev.USER, {"text": "again"}),
]


def test_def6_evidence_compacted_away_counts_only_if_the_compaction_carried_it():
    carried = effective_events([*HISTORY, _compaction(7, 6, "deftest.weather")])
    assert [e.sequence for e in carried] == [7, 6]
    assert active_deferred(carried, CATALOG) == {"deftest.weather"}
    assert active_deferred(effective_events([*HISTORY, _compaction(7, 6)]), CATALOG) == set()
    # Evidence the compaction kept (at or after kept_from) still counts on its own.
    kept = effective_events([*HISTORY, _compaction(7, 4)])
    assert active_deferred(kept, CATALOG) == {"deftest.publish"}


def test_def6_only_the_newest_compaction_speaks_for_the_past():
    history = [*HISTORY, _compaction(7, 6, "http.get"), LogEntry(8, ev.USER, {"text": "b"})]
    assert active_deferred(effective_events(history), CATALOG) == {"http.get"}
    later = [*history, _compaction(9, 8), LogEntry(10, ev.USER, {"text": "c"})]
    assert active_deferred(effective_events(later), CATALOG) == set()
    assert [e.sequence for e in effective_events(later)] == [9, 8, 10]


def test_def6_a_carried_name_outside_the_current_catalog_is_dropped():
    history = [
        _compaction(7, 6, "http.get", "deftest.weather"),
        LogEntry(6, ev.USER, {"text": "x"}),
    ]
    assert active_deferred(effective_events(history), ("deftest.weather",)) == {"deftest.weather"}


# ---------------------------------------------------------------- planning, pure


def _assistant(seq: int, *call_ids: str) -> LogEntry:
    calls = [{"id": c, "name": "test.echo", "arguments": {}} for c in call_ids]
    return LogEntry(seq, ev.ASSISTANT, {"text": "", "tool_calls": calls})


def _res(seq: int, call_id: str) -> LogEntry:
    return LogEntry(seq, ev.TOOL_RESULT, {"call_id": call_id, "tool": "test.echo", "status": ev.OK})


PARKED_TURN = [
    LogEntry(1, ev.MODE_SWITCHED, {"mode": "agent"}),
    LogEntry(2, ev.USER, {"text": "go"}),
    _assistant(3, "a", "b"),
    _res(4, "a"),
    LogEntry(5, ev.TICKET_OPENED, {"call_id": "b"}),
    LogEntry(6, ev.TICKET_DECIDED, {"call_id": "b"}),
    _res(7, "b"),
    _assistant(8),
    LogEntry(9, ev.RUN_COMPLETED, {}),
    LogEntry(10, ev.MODE_SWITCHED, {"mode": "chat"}),
    LogEntry(11, ev.USER, {"text": "next"}),
    _assistant(12, "c"),
    _res(13, "c"),
]


def _count(events) -> int:
    return 10 * len(events)


def test_units_start_at_user_assistant_or_compaction_and_keep_results_with_their_call():
    units = compaction.units_of(PARKED_TURN, _count)
    # A leading mode switch is no message: it joins the unit it opens, never alone.
    assert [[e.sequence for e in u.events] for u in units] == [
        [1, 2],
        [3, 4, 5, 6, 7],
        [8, 9, 10],
        [11],
        [12, 13],
    ]
    assert [u.tokens for u in units] == [20, 50, 30, 10, 20]
    for unit in units:
        calls = {
            c["id"] for e in unit.events if e.type == ev.ASSISTANT for c in e.payload["tool_calls"]
        }
        results = {e.payload["call_id"] for e in unit.events if e.type == ev.TOOL_RESULT}
        assert calls == results


def test_plan_is_none_when_the_context_fits():
    units = compaction.units_of(PARKED_TURN, _count)
    total = sum(u.tokens for u in units)
    assert compaction.plan(units, fixed=50, budget=total + 50) is None
    assert compaction.plan(units, fixed=50, budget=total + 49) is not None


def test_plan_keeps_at_least_the_newest_unit_when_nothing_else_helps():
    units = compaction.units_of(PARKED_TURN, lambda events: 1000)
    plan = compaction.plan(units, fixed=0, budget=500)
    assert plan is not None
    assert plan.kept == (units[-1],) and plan.summarised == tuple(units[:-1])
    assert plan.kept_from == 12


def test_plan_summarises_the_fewest_oldest_units_that_reach_the_target():
    units = [
        compaction.Unit((LogEntry(i, ev.USER, {}),), tokens)
        for i, tokens in enumerate([300] * 5, 1)
    ]
    # budget 1000: target 600, allowance 125 -> keep 1 unit (425), 2 units would be 725.
    plan = compaction.plan(units, fixed=0, budget=1000)
    assert plan is not None
    assert plan.summary_allowance == 125
    assert [u.first_sequence for u in plan.kept] == [5]
    # budget 1400: target 840, allowance 175 -> keep 2 units (775); 3 would be 1075.
    plan = compaction.plan(units, fixed=0, budget=1400)
    assert plan is not None
    assert [u.first_sequence for u in plan.kept] == [4, 5]
    assert compaction.plan(units, fixed=0, budget=1500) is None  # 1500 fits exactly


@given(
    tokens=st.lists(st.integers(min_value=0, max_value=2000), min_size=1, max_size=30),
    fixed=st.integers(min_value=0, max_value=3000),
    budget=st.integers(min_value=1, max_value=20000),
)
def test_plan_properties(tokens, fixed, budget):
    units = [compaction.Unit((LogEntry(i, ev.USER, {}),), t) for i, t in enumerate(tokens, 1)]
    plan = compaction.plan(units, fixed=fixed, budget=budget)
    if fixed + sum(tokens) <= budget or len(units) < 2:
        assert plan is None
        return
    assert plan is not None
    assert plan.summarised + plan.kept == tuple(units)  # an order-keeping split
    assert plan.summarised and plan.kept
    assert plan.summary_allowance == max(64, min(1024, budget // 8))
    target = budget * compaction.TARGET_SHARE
    reserve = plan.summary_allowance + compaction.SUMMARY_OVERHEAD
    kept = fixed + reserve + sum(u.tokens for u in plan.kept)
    cut = len(plan.summarised)
    if cut < len(units) - 1:
        assert kept <= target  # it stopped because it reached the target ...
    if cut > 1:
        one_less = kept + units[cut - 1].tokens
        assert one_less > target  # ... and not a unit later than needed


def test_the_transcript_for_the_summariser_is_plain_text():
    events = [
        LogEntry(1, ev.COMPACTION, {"summary": "old"}),
        LogEntry(2, ev.USER, {"text": "hi"}),
        LogEntry(
            3,
            ev.ASSISTANT,
            {
                "text": "ok",
                "tool_calls": [{"id": "a", "name": "http.get", "arguments": {"url": "u"}}],
            },
        ),
        LogEntry(
            4,
            ev.TOOL_RESULT,
            {"call_id": "a", "tool": "http.get", "status": "ok", "content": "page"},
        ),
    ]
    assert compaction.transcript(events).splitlines() == [
        "Earlier summary: old",
        "User: hi",
        "Assistant: ok [called http.get({'url': 'u'})]",
        "Result of http.get (ok): page",
    ]


@pytest.mark.django_db
def test_def6_a_scripted_run_follows_its_script_across_a_mid_prompt_compaction(staff):
    text = words(80, "word")
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "test.echo", "arguments": {"text": f"turn{i} {text}"}}]}
        for i in range(6)
    ]
    make_configuration(
        "cfg",
        provider=make_provider("p", zone="local"),
        model="m",
        allowed_tools=["test.echo"],
        modes=modes(agent=(["test.echo"], [])),
        context_budget_tokens=700,
        script={"turns": [*turns, {"text": "finished"}], "summary": "sum"},
    )
    run = submit(staff, "cfg")
    outcome = execute_run(run.pk)
    assert compactions(run.thread_id)
    run.refresh_from_db()
    assert (outcome, run.failure) == ("completed", None)
    echoed = [
        e.payload["content"].split()[0]
        for e in thread_events(run.thread_id)
        if e.type == ev.TOOL_RESULT
    ]
    assert echoed == [f"turn{i}" for i in range(6)]


_HOSTILE_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=200)


@given(
    text=_HOSTILE_TEXT,
    arguments=st.dictionaries(_HOSTILE_TEXT, _HOSTILE_TEXT, max_size=3),
    raw=st.one_of(st.none(), _HOSTILE_TEXT),
)
def test_def6_the_byte_bound_never_counts_fewer_than_the_tokens(text, arguments, raw):
    """A context that fits at a byte per token fits by token count too, so the budget
    check may skip the tokenizer (PERF-1) without ever sending more than the budget."""
    call_ = ToolCall(id="c1", name="notes_write", arguments=arguments, raw_arguments=raw or None)
    for message in (
        UserMessage(text),
        AssistantMessage(text, (call_,)),
        ToolResultMessage(call_id="c1", name="notes_write", content=text),
    ):
        assert message_bytes(message) >= message_tokens(message)
