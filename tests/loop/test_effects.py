"""How a side effect happens once (TOOL-3, TOOL-4, INT-3, HITL-11): the rules of
runtime/effects.py over plain values, without a database."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from agentruns import events as ev
from agentruns.classes import DataClass
from agentruns.models import ToolInvocation
from agentruns.runtime import effects
from agentruns.runtime.state import ProposedCall
from agentruns.tools.registry import Effect, Tool, ToolOutput

SENT = datetime(2026, 12, 7, 5, 0, tzinfo=UTC)
WRITE = Tool(
    name="mail.send",
    description="",
    parameters={},
    group="mail",
    output_class=DataClass.PUBLIC,
    effect=Effect.WRITE,
    version="1",
    execute=lambda arguments, context: ToolOutput("sent"),
)
IN_STEP = replace(WRITE, name="notes.write", transactional=True)
READ = replace(WRITE, name="notes.read", effect=Effect.READ_ONLY)


def test_tool4_only_an_external_write_is_watermarked_and_once_sent_never_runs_again():
    assert effects.watermarked(WRITE)
    assert not effects.watermarked(IN_STEP) and not effects.watermarked(READ)
    assert effects.uncertain(WRITE, SENT) and not effects.uncertain(WRITE, None)
    # A transactional write commits with its record: a mark could not outlive it.
    assert not effects.uncertain(IN_STEP, SENT)
    (mark,) = effects.watermark([7], SENT)
    assert mark.changes() == {"status": ToolInvocation.Status.EXECUTING, "effect_sent_at": SENT}


def test_tool3_the_key_is_what_the_call_is_not_which_attempt_runs_it():
    call = ProposedCall("c1", "mail.send", {"to": "a@example.org"})
    key = effects.idempotency_key(7, 2, call, WRITE)
    assert key == effects.idempotency_key(
        7, 2, ProposedCall("c1", "mail.send", {"to": "a@example.org"}), WRITE
    )
    assert key != effects.idempotency_key(
        7, 2, replace(call, arguments={"to": "b@example.org"}), WRITE
    )
    assert key != effects.idempotency_key(7, 3, call, WRITE)


def test_int3_a_tool_that_cannot_tell_whether_it_acted_says_so_unless_it_only_reads():
    lost = ToolOutput("Error: the server hung up.", ok=False, uncertain=True)
    said = effects.outcome_unknown(WRITE, lost)
    assert said is not None and said.startswith("Outcome unknown: the server hung up.")
    assert effects.outcome_unknown(READ, lost) is None
    assert effects.outcome_unknown(WRITE, ToolOutput("Error: refused.", ok=False)) is None
    assert effects.redoable(READ) and not effects.redoable(WRITE)


def test_hitl11_an_early_end_closes_each_open_call_uncertain_only_where_it_was_sent():
    calls = [ProposedCall("a", "mail.send", {}), ProposedCall("b", "mail.send", {})]
    items, updates = effects.close_open_calls(calls, {"a": (1, True), "b": (2, False)}, SENT)
    assert [(kind, payload["status"]) for kind, payload in items] == [
        (ev.TOOL_RESULT, ev.UNCERTAIN),
        (ev.TOOL_RESULT, ev.ERROR),
    ]
    assert [(u.pk, u.status) for u in updates] == [
        (1, ToolInvocation.Status.UNCERTAIN),
        (2, ToolInvocation.Status.INTERRUPTED),
    ]
