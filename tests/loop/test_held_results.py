"""A turn's read-only results are held and written with the next send's audit rows
(runtime/journal.py): LOOP-4 (committed before the loop acts on them), CG-4 (the audit row,
durably, before the send it justifies), TOOL-3/TOOL-4 (a write's result is never held)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentruns.bench import workload
from agentruns.models import Configuration, Event, GateAudit, Provider, Run, ToolInvocation
from agentruns.runtime.loop import execute_run
from agentruns.services.runs import Submission, run_submit

pytestmark = pytest.mark.django_db(transaction=True)

RELAXED = "set_config('synchronous_commit', 'off', true)"


def _scripted(slug: str, turns: list[dict], **fields) -> Configuration:
    provider, _ = Provider.objects.get_or_create(
        slug="held", defaults={"name": "Held", "kind": "scripted", "trust_zone": "local"}
    )
    return Configuration.objects.create(
        slug=slug, name=slug, provider=provider, model="m", script={"turns": turns}, **fields
    )


def _steps(run_id: int) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        assert execute_run(run_id) == Run.Status.COMPLETED
    return [q["sql"] for q in queries.captured_queries if q["sql"].startswith("WITH fence")]


def test_loop4_cg4_a_turns_results_go_with_the_next_audit_row_in_one_durable_statement(staff):
    config = workload.configuration("held-reference", 3, 2)
    run_id = workload.submit(config, staff)
    steps = _steps(run_id)
    audited = [sql for sql in steps if "au AS (INSERT" in sql]
    # The first send has nothing held before it; each later one carries the two results.
    assert len(audited) == 4
    assert "ev AS (INSERT" not in audited[0]
    # ... and their two completions, as the rows of one UPDATE (PERF-1).
    assert all("ev AS (INSERT" in sql and "up0 AS (UPDATE" in sql for sql in audited[1:])
    assert not any("up1 AS" in sql for sql in audited)
    assert not any(RELAXED in sql for sql in audited), "an audit row waits for the WAL flush"
    # No result is written on its own: 4 sends, 4 model turns (the last one ends the run).
    assert len(steps) == 8
    types = Event.objects.filter(run_id=run_id).order_by("sequence")
    assert [e.type for e in types].count("tool.result") == 6
    assert GateAudit.objects.filter(run_id=run_id).count() == 4
    statuses = set(ToolInvocation.objects.filter(run_id=run_id).values_list("status", flat=True))
    assert statuses == {ToolInvocation.Status.COMPLETED}


def test_tool3_a_writes_result_is_committed_at_once_never_held(staff):
    config = _scripted(
        "held-write",
        [
            {"tool_calls": [{"name": "notes.write", "arguments": {"title": "t", "body": "b"}}]},
            {"text": "done"},
        ],
        allowed_tools=["notes"],
        approval_exempt_tools=["notes.write"],
    )
    run, _ = run_submit(user=staff, submission=Submission(configuration=config.slug, input="go"))
    steps = _steps(run.pk)
    results = [sql for sql in steps if "ev AS (INSERT" in sql and "up0 AS (UPDATE" in sql]
    # The watermark, then the result alone and durable, then the next send's audit row.
    written_alone = [sql for sql in results if "au AS (INSERT" not in sql]
    assert written_alone and not any(RELAXED in sql for sql in written_alone)


def test_loop4_results_held_when_the_run_ends_are_written_with_its_end(staff, settings):
    settings.AGENTRUNS_MAX_TURNS = 1  # the run ends at its second turn, before any send
    config = _scripted(
        "held-end",
        [{"tool_calls": [{"name": "clock.now", "arguments": {}}]}, {"text": "never"}],
        allowed_tools=["clock.now"],
    )
    run, _ = run_submit(user=staff, submission=Submission(configuration=config.slug, input="go"))
    assert execute_run(run.pk) == Run.Status.FAILED
    run.refresh_from_db()
    assert run.failure["code"] == "turn_limit"
    events = list(Event.objects.filter(run=run).order_by("sequence"))
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events] == [
        "message.user",
        "message.assistant",
        "tool.result",
        "run.failed",
    ]
    assert ToolInvocation.objects.get(run=run).status == ToolInvocation.Status.COMPLETED
