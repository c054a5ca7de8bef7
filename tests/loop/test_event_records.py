"""LOOP-3, LOOP-8: the log is the only authority, so its schema is one record per event
type. A record writes exactly the JSON the log has always stored (no data migration: a
stored row reads back and writes out unchanged, key order included), reads the old key
`step` as `turn_index`, and reads a stored payload as hostile input: a row written
before a key existed, a wrong type or no object at all gets defaults, never an
exception (SEC-3)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentruns import events as ev
from agentruns.events import LogEntry
from agentruns.runtime.state import restore

LABEL = {"class": "internal", "origin": {"kind": "snippet", "name": "handbook"}}
SENT = {
    "configuration_version": 3,
    "link_version": 2,
    "provider_version": 1,
    "zone": "internal",
    "ceiling": "internal",
    "sources": {"snippet:handbook": 4},
    "withheld": [7],
}
CALL = {"id": "c1", "name": "clock.now", "arguments": {}}
RAW_CALL = {"id": "c2", "name": "notes.write", "arguments": None, "raw_arguments": "{oops"}
EDIT = {"original_digest": "d0", "arguments_digest": "d1", "edited_by": "ann"}
WHICH = {"correlation_id": "u-1", "call_id": "c1", "kind": "tool_permission", "tool": "x.y"}

# Payloads exactly as the writers before the records stored them (one per shape).
STORED: list[tuple[str, dict[str, Any]]] = [
    (ev.USER, {"text": "hello"}),
    (ev.USER, {"text": "copied", "copied_from": {"run": 6, "sequence": 1}}),
    (ev.USER, {"text": "a delegated child's task", "label": LABEL}),  # CG-12, DEL-2
    (
        ev.ASSISTANT,
        {
            "text": "",
            "tool_calls": [CALL, RAW_CALL],
            "step": 2,
            "tool_calls_before": 1,
            "served_by": {"configuration": "main", "provider": "openai", "model": "m"},
            "usage": {"input_tokens": 10, "output_tokens": 3},
            "sent": SENT,
            "label": LABEL,
            "granted": ["c1"],
        },
    ),
    (
        ev.ASSISTANT,
        {
            "text": "done",
            "tool_calls": [],
            "step": 0,
            "tool_calls_before": 0,
            "served_by": {},
            "sent": {},
            "granted": [],
            "copied_from": {"run": 6, "sequence": 2},
        },
    ),
    (ev.TOOL_RESULT, {"call_id": "c1", "tool": "clock.now", "status": "ok", "content": "12"}),
    (
        ev.TOOL_RESULT,
        {
            "call_id": "s1",
            "tool": "tool_search",
            "status": "ok",
            "content": "found",
            "class": "public",
            "added_tool_names": ["http.get"],
        },
    ),
    (
        ev.TOOL_RESULT,
        {
            "call_id": "d1",
            "tool": "agent.delegate",
            "status": "ok",
            "content": "child said",
            "tool_calls": 4,
            "class": "internal",
        },
    ),
    (ev.TICKET_OPENED, {**WHICH, "deadline": "2026-12-07T04:00:00+00:00"}),
    (ev.TICKET_OPENED, {**WHICH, "kind": "delegation", "deadline": None, "child": 12}),
    (
        ev.TICKET_DECIDED,
        {"correlation_id": "u-1", "call_id": "c1", "decision": "deny", "by": "bo", "note": "no"},
    ),
    (
        ev.TICKET_DECIDED,
        {
            "correlation_id": "u-1",
            "call_id": "c1",
            "decision": "allow",
            "by": "bo",
            "note": "",
            "approvers": ["ann", "bo"],
            "required": 2,
            **EDIT,
            "arguments": {"text": "edited"},
        },
    ),
    (
        ev.TICKET_DECIDED,
        {
            "correlation_id": "u",
            "call_id": "c",
            "decision": "expired",
            "by": None,
            "note": "",
            "deadline": None,
        },
    ),
    (
        ev.TICKET_DECIDED,
        {
            "correlation_id": "u",
            "call_id": "c",
            "decision": "delegated",
            "by": None,
            "note": "",
            "child": 9,
        },
    ),
    (
        ev.TICKET_APPROVED,
        {
            "correlation_id": "u-1",
            "call_id": "c1",
            "by": "ann",
            "note": "fine",
            "approvals": 1,
            "required": 2,
            "approvers": ["ann"],
        },
    ),
    (ev.TICKET_REMINDED, {**WHICH, "deadline": None}),
    (ev.TICKET_ESCALATED, {**WHICH, "deadline": None, "group": "leads"}),
    (ev.CONTEXT_REFUSED, {"detail": "refused", "configuration": "main", "zone": "external"}),
    (ev.CONTEXT_OBSERVED, {"verdict": "refused (observed)"}),
    (
        ev.SOURCES_DROPPED,
        {"sources": [{"kind": "snippet", "id": 1, "name": "a", "reason": "gone"}]},
    ),
    (ev.SECRET_REDACTED, {"where": "input", "kinds": {"api_key": 2}}),
    (ev.MODE_SWITCHED, {"mode": "agent"}),
    (
        ev.COMPACTION,
        {
            "summary": "S",
            "kept_from": 8,
            "active_deferred": ["http.get"],
            "summarised_events": 5,
            "results": {"clock.now": "public"},
            "usage": {"input_tokens": 1, "output_tokens": 2},
            "label": LABEL,
        },
    ),
    (ev.RUN_COMPLETED, {"final_reply": "bye", "label": LABEL}),
    (ev.RUN_COMPLETED, {"final_reply": "bye"}),
    (ev.RUN_FAILED, {"code": "context_budget_exceeded", "detail": "big", "needed": 9, "budget": 8}),
    (ev.RUN_CANCELLED, {"by": "ann"}),
    (
        ev.RUN_FORKED,
        {
            "configuration": "other",
            "carried": [{"kind": "snippet", "id": 3, "from": 6}],
            "forked_from": {"run": 6, "at": 8},
        },
    ),
    (
        ev.RUN_REPLAYED,
        {
            "configuration": "main",
            "carried": [],
            "replay": 4,
            "replay_of": {"run": 6, "at": 8},
            "recording": [
                {"tool": "clock.now", "arguments": "d", "status": "ok", "content": "12"},
                {
                    "tool": "tool_search",
                    "arguments": "e",
                    "status": "ok",
                    "content": "found",
                    "class": "public",
                    "added_tool_names": ["http.get"],
                },
            ],
        },
    ),
    (
        ev.RUN_DELEGATED,
        {
            "delegated_by": {"run": 5, "call_id": "d1"},
            "configuration": "helper",
            "carried": [],
            "depth": 2,
            "tool_call_budget": 3,
            "trace_parent": None,
        },
    ),
    (  # DEL-2: a child's floor, the parent's effective class at the call
        ev.RUN_DELEGATED,
        {
            "delegated_by": {"run": 5, "call_id": "d2"},
            "configuration": "helper",
            "carried": [],
            "depth": 1,
            "tool_call_budget": 2,
            "trace_parent": None,
            "floor": {
                "class": "restricted",
                "origin": {"kind": "tool_result", "name": "vault.customer_lookup"},
            },
        },
    ),
    (
        ev.RUN_REPLAYED,
        {
            "configuration": "candidate",
            "carried": [{"kind": "snippet", "id": 3, "from": 6}],
            "replay": 4,
            "replay_of": {"run": 6, "at": 2},
            "recording": [
                {
                    "tool": "notes.read",
                    "arguments": "9f2c",  # the digest of the call's arguments
                    "status": "ok",
                    "content": "notes",
                    "class": "internal",
                }
            ],
        },
    ),
]


@pytest.mark.parametrize(
    ("kind", "payload"), STORED, ids=[f"{k}-{i}" for i, (k, _) in enumerate(STORED)]
)
def test_loop3_a_stored_payload_reads_back_and_writes_out_byte_for_byte(kind, payload):
    record = ev.parse(kind, payload)
    assert type(record) is ev.RECORDS[kind]
    assert record.item() == (kind, payload)
    assert json.dumps(record.to_payload()) == json.dumps(payload)  # the order too
    assert ev.parse(kind, record.to_payload()) == record


def test_loop3_every_event_type_has_a_record_and_every_record_a_stored_shape_here():
    assert set(ev.RECORDS) == set(ev.EVENT_TYPES)
    assert {kind for kind, _ in STORED} == set(ev.EVENT_TYPES)


def test_loop3_the_stored_key_step_is_the_turns_index():
    turn = ev.parse(ev.ASSISTANT, {"text": "t", "tool_calls": [], "step": 4})
    assert isinstance(turn, ev.AssistantMessage) and turn.turn_index == 4
    assert ev.AssistantMessage(turn_index=4).to_payload()["step"] == 4


def test_loop3_an_unknown_event_type_keeps_its_payload():
    record = ev.parse("future.kind", {"a": [1]})
    assert record.item() == ("future.kind", {"a": [1]})


def test_cg11_a_redaction_is_recorded_by_one_constructor_and_only_when_something_was_found():
    assert ev.redacted("input", {}) == []
    assert ev.redacted("input", {"api_key": 1}) == [
        (ev.SECRET_REDACTED, {"where": "input", "kinds": {"api_key": 1}})
    ]


def test_loop3_a_log_entry_made_of_a_record_reads_back_the_same_record():
    turn = ev.AssistantMessage(text="t", tool_calls=(ev.ProposedCall("c", "n", {}),), turn_index=0)
    entry = LogEntry.of(3, turn, run_id=1)
    assert entry.type == ev.ASSISTANT and entry.data is turn
    assert LogEntry(3, entry.type, entry.payload, 1).data == turn


hostile_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
known_keys = sorted({key for _, payload in STORED for key in payload} | {"step"})


@given(
    kind=st.sampled_from(ev.EVENT_TYPES),
    payload=st.dictionaries(st.sampled_from(known_keys), hostile_values, max_size=8)
    | hostile_values,
)
def test_sec3_a_hostile_stored_payload_reads_as_defaults_never_an_exception(kind, payload):
    record = ev.parse(kind, payload)
    assert type(record) is ev.RECORDS[kind]
    again = ev.parse(kind, json.loads(json.dumps(record.to_payload())))
    assert again.to_payload() == record.to_payload()  # what it reads, it writes back stably
    ev.summary(kind, payload if isinstance(payload, dict) else {})
    restore(None, [LogEntry(1, kind, payload if isinstance(payload, dict) else {}, 1)])


@pytest.mark.parametrize("decision", [ev.EXPIRED, ev.DELEGATED, ev.TIMED, ev.ALLOW])
@given(deadline=hostile_values)
def test_sec3_a_decisions_words_never_fail_on_what_its_row_holds(decision, deadline):
    payload = {"decision": decision, "deadline": deadline, "child": deadline, "by": deadline}
    assert ev.summary(ev.TICKET_DECIDED, payload)


def test_rec1_a_turn_logged_before_turns_kept_their_budget_folds_with_defaults():
    """A row from before `granted`, `tool_calls_before` and `step` were recorded: every
    call counts as granted, the count runs on from the fold, the index is the next turn."""
    log = [
        LogEntry(1, ev.USER, {"text": "go"}, 1),
        LogEntry(2, ev.ASSISTANT, {"text": "", "tool_calls": [CALL]}, 1),
        LogEntry(3, ev.TOOL_RESULT, {"call_id": "c1", "tool": "clock.now", "status": "ok"}, 1),
    ]
    state = restore(None, log)
    assert state.turn is not None and state.turn.turn_index == 0
    assert state.turn.granted == ["c1"] and state.tool_calls_used == 1
    assert state.turn.results == {"c1": "ok"} and state.turns == 1
