"""REC-1..REC-4, TOOL-4, LOOP-8, CLU-2: a worker killed at any point of the two-tool run
costs time, never information, and never a second execution of a side effect.

The two-tool run: turn one proposes `notes.write` (a database write, transactional) and
`test.external_write` (an external effect behind the `effect_sent_at` watermark), both
exempt from approval; turn two answers. The model is the fake OpenAI server, replying from
the request alone, so a request repeated after a crash gets the same reply and every model
call is counted in `fake.requests`.

The uninterrupted run is first recorded in a child process with a fault trace; then for
every point occurrence in that trace a fresh run is SIGKILLed there in a child and resumed
after its lease expired.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentruns import events as ev
from agentruns.models import Checkpoint, Note, Run, ToolInvocation
from agentruns.runtime import faults
from agentruns.runtime.loop import execute_run
from tests.support.crash import (
    EXTERNAL_CALL,
    FINAL_TEXT,
    NOTE_CALL,
    Baseline,
    comparable_history,
    effect_lines,
    expected_history,
    expire_lease,
    history,
    note_written,
    occurrences,
    point_where,
    provider_pairing_problems,
    read_trace,
    record_baseline,
    run_child,
    submit,
    two_tool_configuration,
    two_tool_reply,
    uncertain_write,
)
from tests.support.fake_provider import FakeProvider

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MAX_TOOL_CALLS = 2


@pytest.fixture
def fake():
    with FakeProvider(default=two_tool_reply) as server:
        yield server


@pytest.fixture
def baseline(staff, fake, effects) -> Baseline:
    """The uninterrupted run, driven in-process."""
    two_tool_configuration(fake, max_tool_calls=MAX_TOOL_CALLS)
    return record_baseline(staff, fake, "two-tool")


def crash_and_resume(
    staff: Any, fake: FakeProvider, effects: Path, baseline: Baseline, point: str
) -> None:
    """REC-1..REC-4, TOOL-4, LOOP-8: kill a fresh run's worker at `point`, let its lease
    expire, resume it; it completes with the uninterrupted history, every tool ran once."""
    run = submit(staff, "two-tool")
    before = len(fake.requests)

    child = run_child(run.pk, faults=point, effect_file=effects)
    assert child.killed, f"the child was not killed at {point}: {child}"

    run.refresh_from_db()
    uncertain = uncertain_write(run.pk, EXTERNAL_CALL["id"])
    lines_at_kill = len(effect_lines(effects, run.pk))
    attempts = 0
    if run.status == Run.Status.RUNNING:
        expire_lease(run.pk)
        assert execute_run(run.pk) == Run.Status.COMPLETED
        attempts = 1
    else:
        # Only the terminal transaction can have committed the end before the kill.
        assert run.status == Run.Status.COMPLETED
        assert execute_run(run.pk) is None

    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    assert run.final_reply == FINAL_TEXT
    expected = expected_history(baseline, EXTERNAL_CALL["id"] if uncertain else None)
    assert comparable_history(run.pk) == expected

    results = Counter(p["call_id"] for kind, p in history(run.pk) if kind == ev.TOOL_RESULT)
    assert results == {NOTE_CALL["id"]: 1, EXTERNAL_CALL["id"]: 1}
    assert Note.objects.filter(run=run).count() == 1
    # Never re-run: an uncertain write keeps whatever the killed worker did (0 or 1 line).
    lines = len(effect_lines(effects, run.pk))
    assert lines == (lines_at_kill if uncertain else 1)
    assert lines <= 1

    # REC-4: a committed turn is never asked for again; only a reply lost inside the
    # provider call (nothing committed) costs one more request.
    extra = 1 if point.startswith(faults.PROVIDER) else 0
    assert len(fake.requests) - before == baseline.model_requests + extra

    assert run.tool_calls_used == MAX_TOOL_CALLS
    used = Checkpoint.objects.filter(run=run).values_list("state__tool_calls_used", flat=True)
    assert max(used) <= MAX_TOOL_CALLS
    assert provider_pairing_problems(run.pk) == []
    assert run.attempts == attempts


def test_a_worker_killed_at_every_point_of_the_trace_recovers_the_same_run(
    staff, fake, effects, baseline, tmp_path
):
    """Record the uninterrupted run's fault trace in a child; then, for every point
    occurrence in it, kill a fresh run there and resume it (see `crash_and_resume`)."""
    trace = tmp_path / "trace.log"
    run = submit(staff, "two-tool")
    before = len(fake.requests)
    child = run_child(run.pk, trace=trace, effect_file=effects)
    assert child.returncode == 0 and "outcome=completed" in child.stdout, str(child)
    # A worker process reaches exactly what an in-process run reaches.
    assert history(run.pk) == baseline.history
    assert len(fake.requests) - before == baseline.model_requests == 2
    assert len(effect_lines(effects, run.pk)) == 1

    points = occurrences(read_trace(trace))
    assert points == baseline.points
    # Every kind of boundary is in the trace: both model calls, the external write's
    # watermark and effect, and the commits around them.
    kinds = Counter(point.split(":")[0] for point in points)
    assert kinds >= Counter(
        {faults.COMMIT: 4, faults.PROVIDER: 2, faults.EFFECT_SENT: 1, faults.TOOL_DONE: 1}
    ), points
    failures = {}
    for point in points:
        try:
            crash_and_resume(staff, fake, effects, baseline, point)
        except AssertionError as failure:
            failures[point] = str(failure).splitlines()[0]
    assert failures == {}, f"crash points that did not recover, of {points}"


@pytest.mark.parametrize(("point", "lines"), [("effect_sent:1", 0), ("tool_done:1", 1)])
def test_an_external_write_whose_effect_may_have_happened_is_uncertain_never_rerun(
    staff, fake, effects, api, point, lines
):
    """TOOL-4: watermark set, then the worker died: the call is not re-run, the model is
    told the outcome is unknown, and the call is shown (invocation and API) as uncertain."""
    two_tool_configuration(fake, max_tool_calls=MAX_TOOL_CALLS)
    run = submit(staff, "two-tool")

    child = run_child(run.pk, faults=point, effect_file=effects)
    assert child.killed, str(child)
    lines_at_kill = len(effect_lines(effects, run.pk))
    expire_lease(run.pk)
    assert execute_run(run.pk) == Run.Status.COMPLETED

    assert len(effect_lines(effects, run.pk)) == lines_at_kill == lines
    invocation = ToolInvocation.objects.get(run=run, call_id=EXTERNAL_CALL["id"])
    assert invocation.status == ToolInvocation.Status.UNCERTAIN
    assert invocation.effect_sent_at is not None
    # The model's next (and last) request carries the uncertain outcome for that call.
    [told] = [
        m
        for m in fake.requests[-1].body["messages"]
        if m.get("role") == "tool" and m.get("tool_call_id") == EXTERNAL_CALL["id"]
    ]
    assert "Outcome unknown" in told["content"]
    body = api.get(f"/api/runs/{run.pk}/").json()
    assert [c["call_id"] for c in body["uncertain_calls"]] == [EXTERNAL_CALL["id"]]


def test_a_live_lease_is_not_taken_and_an_expired_one_is_resumed_by_another_process(
    staff, fake, effects
):
    """CLU-2, REC-1: a second worker cannot claim a run whose lease is live; once it
    expired, another process resumes it and the first worker's committed work counts."""
    two_tool_configuration(fake, max_tool_calls=MAX_TOOL_CALLS)
    point = point_where(staff, "two-tool", note_written)
    run = submit(staff, "two-tool")
    before = len(fake.requests)
    first = run_child(run.pk, faults=point, effect_file=effects)  # the note is written
    assert first.killed, str(first)
    run.refresh_from_db()
    epoch = run.epoch

    early = run_child(run.pk, effect_file=effects)
    assert early.returncode == 3, str(early)  # not claimable: the lease has not expired
    run.refresh_from_db()
    assert (run.status, run.epoch) == (Run.Status.RUNNING, epoch)

    expire_lease(run.pk)
    second = run_child(run.pk, effect_file=effects)
    assert second.returncode == 0 and "outcome=completed" in second.stdout, str(second)

    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    assert run.epoch == epoch + 1
    assert Note.objects.filter(run=run).count() == 1
    assert len(effect_lines(effects, run.pk)) == 1
    assert len(fake.requests) - before == 2
