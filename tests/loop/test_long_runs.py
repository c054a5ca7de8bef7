"""PERF-1, PERF-3: what a turn does for itself does not grow with the run. The budget
check (DEF-6) and the reuse check on call ids (LOOP-7) read each event of the log once
per run, not the whole log once per turn."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from unittest.mock import Mock

import pytest

from agentruns import events as ev
from agentruns.events import LogEntry
from agentruns.models import Run
from agentruns.runtime.actions import compact, model_turn
from agentruns.runtime.actions.base import Memos
from agentruns.runtime.loop import execute_run
from tests.support.catalog import make_configuration
from tests.support.deferred import thread_events
from tests.support.runs import submit

TURNS = 40


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create(username="staff", is_staff=True)


def test_perf1_a_long_run_measures_each_event_for_the_budget_once(staff, monkeypatch):
    """Before: the check summed every event's size before every turn, ~TURNS² lookups."""
    make_configuration(
        "long",
        model="m",
        allowed_tools=["clock.now"],
        max_tool_calls=TURNS,
        script={"turns": [*[_clock_turn()] * TURNS, {"text": "done"}]},
    )
    measured = Mock(wraps=compact._event_tokens)
    monkeypatch.setattr(compact, "_event_tokens", measured)
    run = submit(staff, "long")

    assert execute_run(run.pk) == Run.Status.COMPLETED
    events = thread_events(run.thread_id)
    assert sum(1 for e in events if e.type == ev.TOOL_RESULT) == TURNS
    assert 0 < measured.call_count <= len(events)


def test_loop7_the_reuse_check_reads_only_the_events_added_since_it_last_read():
    ctx = SimpleNamespace(events=[_turn(1, "a", "b")], memos=Memos())
    assert model_turn._earlier_call_ids(ctx) == {"a", "b"}

    ctx.events += [LogEntry(2, ev.TOOL_RESULT, {"call_id": "a"}, 1), _turn(3, "c")]
    assert model_turn._earlier_call_ids(ctx) == {"a", "b", "c"}
    assert ctx.memos.call_ids[0] == 3

    ctx.events[0] = _turn(1, "changed")  # an event already read is not read again
    assert "changed" not in model_turn._earlier_call_ids(ctx)


def _clock_turn() -> dict[str, Any]:
    return {"tool_calls": [{"name": "clock.now", "arguments": {}}]}


def _turn(sequence: int, *call_ids: str) -> LogEntry:
    calls = [{"id": call_id, "name": "clock.now", "arguments": {}} for call_id in call_ids]
    return LogEntry(sequence, ev.ASSISTANT, {"text": "", "tool_calls": calls}, 1)
